//! Many client connections held by one thread: the waiters of the waiter curves, tens
//! of thousands of them. Each is a plain nonblocking socket in one epoll set (through
//! `rustix`), written with testkit's RESP encoder and read with its parser, so that a
//! client costs a socket and a few bytes, not a thread.
//!
//! The connections are spread over the server's loopback addresses (`ADDRESSES`): the
//! kernel has some 28,000 ephemeral ports per (source, destination) pair, and a
//! hundred thousand clients need several destinations. Each is closed with a zero
//! linger (a reset): no `TIME_WAIT` is left to hold its port, and the server frees the
//! client at once.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::event::epoll;
use rustix::event::Timespec;
use testkit::resp::{parse, Reply};

/// Loopback addresses the curves' server listens on, `127.0.0.1` to `127.0.0.<n>`.
pub const ADDRESSES: u8 = 5;

/// How long a read for an expected reply may wait before the run is abandoned.
const PATIENCE: Duration = Duration::from_secs(20);

/// The address connection number `i` goes to.
pub fn address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 1 + (i % usize::from(ADDRESSES)) as u8)
}

/// A blocking connection to `address(i)`, closed with a reset when dropped.
pub fn connect(port: u16, i: usize) -> io::Result<TcpStream> {
    let stream = TcpStream::connect((address(i), port))?;
    stream.set_nodelay(true)?;
    rustix::net::sockopt::set_socket_linger(&stream, Some(Duration::ZERO))?;
    stream.set_read_timeout(Some(PATIENCE))?;
    Ok(stream)
}

/// Reads one whole reply from a blocking stream into `inbox` (which keeps whatever
/// follows it).
pub fn read_reply(stream: &mut TcpStream, inbox: &mut Vec<u8>) -> io::Result<Reply> {
    let mut chunk = [0u8; 512];
    loop {
        if let Some((reply, used)) = parse(inbox)? {
            inbox.drain(..used);
            return Ok(reply);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed a waiter's connection",
            ));
        }
        inbox.extend_from_slice(&chunk[..n]);
    }
}

struct Member {
    stream: TcpStream,
    inbox: Vec<u8>,
}

/// Connections registered in one epoll set, numbered in the order they were added.
pub struct Crowd {
    epoll: OwnedFd,
    members: Vec<Member>,
    /// A member whose inbox may still hold whole replies when `serve` last stopped:
    /// its socket may be drained, so epoll would not report it again.
    unread: Option<usize>,
}

impl Crowd {
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            members: Vec::new(),
            unread: None,
        })
    }

    /// Connects one more member (to `address(its number)`) and sends it `first`.
    pub fn join(&mut self, port: u16, first: &[u8]) -> io::Result<usize> {
        let index = self.members.len();
        let mut stream = connect(port, index)?;
        stream.write_all(first)?;
        stream.set_nonblocking(true)?;
        epoll::add(
            &self.epoll,
            &stream,
            epoll::EventData::new_u64(index as u64),
            epoll::EventFlags::IN,
        )?;
        self.members.push(Member {
            stream,
            inbox: Vec::new(),
        });
        Ok(index)
    }

    /// Sends `bytes` on member `index`: a few commands, which an idle socket's send
    /// buffer always has room for (a full one would be an error, not a wait).
    pub fn send(&mut self, index: usize, bytes: &[u8]) -> io::Result<()> {
        self.members[index].stream.write_all(bytes)
    }

    /// Waits for replies on any member and hands each, with its member, to `on_reply`,
    /// until `on_reply` says it has seen enough (returns `false`).
    pub fn serve(
        &mut self,
        mut on_reply: impl FnMut(&mut Self, usize, Reply) -> io::Result<bool>,
    ) -> io::Result<()> {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        let patience = Timespec {
            tv_sec: PATIENCE.as_secs() as _,
            tv_nsec: 0,
        };
        let mut chunk = [0u8; 4096];
        if let Some(index) = self.unread.take() {
            if !self.parse_inbox(index, &mut on_reply)? {
                return Ok(());
            }
        }
        loop {
            events.clear();
            epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&patience),
            )?;
            if events.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no waiter heard from the server in 20 s",
                ));
            }
            let ready: Vec<usize> = events.iter().map(|e| e.data.u64() as usize).collect();
            for index in ready {
                // Everything there is now (level-triggered: what is left is seen again).
                loop {
                    let member = &mut self.members[index];
                    match member.stream.read(&mut chunk) {
                        Ok(0) => {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the server closed a waiter's connection",
                            ))
                        }
                        Ok(n) => member.inbox.extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                if !self.parse_inbox(index, &mut on_reply)? {
                    return Ok(());
                }
            }
        }
    }

    /// Hands every whole reply in member `index`'s inbox to `on_reply`; `false` when
    /// it has seen enough (the rest waits for the next `serve`).
    fn parse_inbox(
        &mut self,
        index: usize,
        on_reply: &mut impl FnMut(&mut Self, usize, Reply) -> io::Result<bool>,
    ) -> io::Result<bool> {
        while let Some((reply, used)) = parse(&self.members[index].inbox)? {
            self.members[index].inbox.drain(..used);
            if !on_reply(self, index, reply)? {
                self.unread = Some(index);
                return Ok(false);
            }
        }
        Ok(true)
    }
}
