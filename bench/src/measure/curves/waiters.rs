//! The waiters curve's state: one key held exclusively, `n` clients queued on it with
//! `LOCK.ACQUIRE … BLOCK 0` (each its own connection in a `Crowd`, with a token of its
//! own), and a few more connections that join and leave; and its operations, each
//! leaving `n` waiters queued.
//!
//! The holder and the waiters form a ring: a handoff is the holder's `LOCK.RELEASE`
//! (the server grants the head of the queue in that step) followed on the same
//! connection by its `LOCK.ACQUIRE … BLOCK 0`, which queues it last. Which client is
//! granted is read off the epoll set, not predicted, so nothing here depends on the
//! order the server queued them in.

use std::io::{self, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use testkit::resp::{encode, Conn, Reply};

use crate::measure::curves::crowd::{self, Crowd};
use crate::measure::curves::{pipelined, token, Expect};
use crate::results::curves::Op;

const KEY: &[u8] = b"curve:queue";
const WAITER: &[u8; 8] = b"waiter--";
/// Connections added between two checks that the server has queued them all: fewer
/// than the listen backlog (Redis's default 511), so that no connection attempt is
/// dropped and retried a second later.
const BATCH: usize = 400;

/// `LOCK.ACQUIRE key lease TOKEN token BLOCK 0`: wait for the lock, for ever.
fn queue(out: &mut Vec<u8>, lease: &[u8], token: &[u8]) {
    encode(
        out,
        &[b"LOCK.ACQUIRE", KEY, lease, b"TOKEN", token, b"BLOCK", b"0"],
    );
}

/// The `waiters` field of `LOCK.INFO` (0 when the key is free and nobody waits).
pub fn queued(conn: &mut Conn) -> io::Result<i64> {
    let reply = conn.call_ok(&[b"LOCK.INFO", KEY])?;
    let Reply::Array(Some(fields)) = &reply else {
        return Ok(0);
    };
    fields
        .chunks(2)
        .find_map(|pair| match pair {
            [Reply::Status(name), Reply::Integer(value)] if name == "waiters" => Some(*value),
            _ => None,
        })
        .ok_or_else(|| io::Error::other(format!("LOCK.INFO replied {reply:?}")))
}

/// Polls `LOCK.INFO` until `count` clients are queued (every 1 ms: a handful of polls
/// in a measurement, against its thousands of commands).
fn wait_for_queue(conn: &mut Conn, count: u64) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = queued(conn)?;
        if now == count as i64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "{now} clients queued on {} after 30 s, {count} expected",
                String::from_utf8_lossy(KEY)
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `n` connections that each sent `PING` and were answered: the memory baseline of
/// the same number of waiters.
pub fn idle_clients(port: u16, n: u64) -> io::Result<Crowd> {
    let mut crowd = Crowd::new()?;
    let mut ping = Vec::new();
    encode(&mut ping, &[b"PING"]);
    let mut joined = 0;
    while joined < n {
        let batch = (n - joined).min(BATCH as u64);
        for _ in 0..batch {
            crowd.join(port, &ping)?;
        }
        let mut answered = 0;
        crowd.serve(|_, _, reply| match reply {
            Reply::Status(pong) if pong == "PONG" => {
                answered += 1;
                Ok(answered < batch)
            }
            other => Err(io::Error::other(format!("PING replied {other:?}"))),
        })?;
        joined += batch;
    }
    Ok(crowd)
}

/// A connection that joins the queue and is unblocked again, once a measurement.
struct Joiner {
    stream: TcpStream,
    inbox: Vec<u8>,
    /// Its `CLIENT ID`, for `CLIENT UNBLOCK`.
    id: Vec<u8>,
}

pub struct Waiters {
    port: u16,
    /// The lease every grant asks for.
    lease: &'static [u8],
    /// Member 0 holds the lock first; members 1..=n queue behind it.
    ring: Crowd,
    /// The member holding the lock now.
    holder: usize,
    n: u64,
    joiners: Vec<Joiner>,
}

impl Waiters {
    /// The held key, no waiter yet (what memory per waiter is measured against); every
    /// grant asks for `lease`.
    pub fn start(port: u16, lease: &'static [u8]) -> io::Result<Self> {
        let mut ring = Crowd::new()?;
        let mut out = Vec::new();
        encode(
            &mut out,
            &[b"LOCK.ACQUIRE", KEY, lease, b"TOKEN", &token(WAITER, 0)],
        );
        ring.join(port, &out)?;
        ring.serve(|_, _, reply| match reply.grant() {
            Some(_) => Ok(false),
            None => Err(io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}"))),
        })?;
        Ok(Self {
            port,
            lease,
            ring,
            holder: 0,
            n: 0,
            joiners: Vec::new(),
        })
    }

    /// Connects the `count` clients that join and leave in `JoinLeave`.
    pub fn add_joiners(&mut self, count: usize) -> io::Result<()> {
        let port = self.port;
        let joiners = (0..count)
            .map(|j| {
                // Spread over the addresses as the ring is.
                let mut stream = crowd::connect(port, j)?;
                let mut out = Vec::new();
                encode(&mut out, &[b"CLIENT", b"ID"]);
                stream.write_all(&out)?;
                let mut inbox = Vec::new();
                let id = match crowd::read_reply(&mut stream, &mut inbox)? {
                    Reply::Integer(id) => id.to_string().into_bytes(),
                    other => return Err(io::Error::other(format!("CLIENT ID replied {other:?}"))),
                };
                Ok(Joiner { stream, inbox, id })
            })
            .collect::<io::Result<Vec<_>>>()?;
        self.joiners.extend(joiners);
        Ok(())
    }

    /// Queues `n` waiters, checking on `admin` every `BATCH` that all came.
    pub fn fill(&mut self, admin: &mut Conn, n: u64) -> io::Result<()> {
        let mut out = Vec::new();
        while self.n < n {
            let end = (self.n + BATCH as u64).min(n);
            for member in self.n + 1..=end {
                out.clear();
                queue(&mut out, self.lease, &token(WAITER, member));
                self.ring.join(self.port, &out)?;
            }
            wait_for_queue(admin, end)?;
            self.n = end;
        }
        Ok(())
    }

    /// `ops` operations of kind `op`, pipelined on `conn` where they are one client's;
    /// `admin` watches the queue. `JoinLeave` does one per joiner, `ops` or not.
    pub fn run(&mut self, conn: &mut Conn, admin: &mut Conn, op: Op, ops: u64) -> io::Result<()> {
        match op {
            Op::BusyAcquire => pipelined(conn, ops, |_, out, expect| {
                encode(out, &[b"LOCK.ACQUIRE", KEY, self.lease]);
                expect.push(Expect::Nil);
            }),
            Op::InfoQueue => pipelined(conn, ops, |_, out, expect| {
                encode(out, &[b"LOCK.INFO", KEY]);
                expect.push(Expect::Fields);
            }),
            Op::JoinLeave => self.join_and_leave(conn, admin),
            Op::Handoff => self.handoffs(ops),
            _ => unreachable!("{op:?} is not a waiters operation"),
        }
    }

    /// Every joiner queues (last), then `CLIENT UNBLOCK` ends each wait as its timeout
    /// would (nil).
    fn join_and_leave(&mut self, conn: &mut Conn, admin: &mut Conn) -> io::Result<()> {
        let mut out = Vec::new();
        encode(
            &mut out,
            &[b"LOCK.ACQUIRE", KEY, self.lease, b"BLOCK", b"0"],
        );
        for joiner in &mut self.joiners {
            joiner.stream.write_all(&out)?;
        }
        wait_for_queue(admin, self.n + self.joiners.len() as u64)?;
        let ids: Vec<&[u8]> = self.joiners.iter().map(|j| j.id.as_slice()).collect();
        pipelined(conn, ids.len() as u64, |i, out, expect| {
            encode(out, &[b"CLIENT", b"UNBLOCK", ids[i as usize]]);
            expect.push(Expect::One);
        })?;
        for joiner in &mut self.joiners {
            let reply = crowd::read_reply(&mut joiner.stream, &mut joiner.inbox)?;
            if !reply.is_nil() {
                return Err(io::Error::other(format!(
                    "an unblocked waiter was answered {reply:?}"
                )));
            }
        }
        Ok(())
    }

    /// `count` handoffs around the ring, each started by the client the last one
    /// granted; returns once every release has been answered too.
    pub fn handoffs(&mut self, count: u64) -> io::Result<()> {
        let lease = self.lease;
        let mut step = Vec::new();
        let mut send_step = |ring: &mut Crowd, member: usize| {
            let mine = token(WAITER, member as u64);
            step.clear();
            encode(&mut step, &[b"LOCK.RELEASE", KEY, &mine]);
            queue(&mut step, lease, &mine);
            ring.send(member, &step)
        };
        send_step(&mut self.ring, self.holder)?;
        let (mut granted, mut released) = (0, 0);
        let mut holder = self.holder;
        self.ring.serve(|ring, member, reply| {
            if reply.integer() == Some(1) {
                released += 1;
            } else if reply.grant().is_some() {
                granted += 1;
                holder = member;
                if granted < count {
                    send_step(ring, member)?;
                }
            } else {
                return Err(io::Error::other(format!(
                    "a handoff's client was answered {reply:?}"
                )));
            }
            Ok(granted < count || released < count)
        })?;
        self.holder = holder;
        Ok(())
    }
}
