//! A minimal, allocation-light RESP2 client over TCP: encodes commands into a caller's
//! buffer (so a whole pipeline goes out in one write) and parses replies in order.
//! The load generator must stay cheaper than the server it loads, so nothing here
//! goes through a general-purpose client library.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One reply as it came off the wire. Status and error lines keep their text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(Vec<u8>),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

impl Reply {
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Status(s) if s == b"OK")
    }

    pub fn integer(&self) -> Option<i64> {
        match self {
            Reply::Integer(n) => Some(*n),
            _ => None,
        }
    }

    pub fn bulk(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// The `[token, fence]` of a granted `LOCK.ACQUIRE`.
    pub fn grant(&self) -> Option<(&[u8], i64)> {
        match self {
            Reply::Array(items) => match items.as_slice() {
                [Reply::Bulk(token), Reply::Integer(fence)] => Some((token, *fence)),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Appends one command in RESP multibulk form.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_decimal(out, args.len() as u64);
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.push(b'$');
        push_decimal(out, arg.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends the decimal digits of `n` (no allocation, no formatting machinery).
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// A blocking connection with its own read buffer.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Conn {
    pub fn connect(port: u16) -> io::Result<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Self {
            stream,
            buf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
        })
    }

    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends one command and waits for its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut out = Vec::with_capacity(64);
        encode(&mut out, args);
        self.send(&out)?;
        self.read_reply()
    }

    /// `call` that turns an error reply into an `io::Error` naming the command.
    pub fn call_ok(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        match self.call(args)? {
            Reply::Error(text) => Err(io::Error::other(format!(
                "{} failed: {text}",
                String::from_utf8_lossy(args.first().copied().unwrap_or_default())
            ))),
            reply => Ok(reply),
        }
    }

    /// Reads the next complete reply, refilling the buffer as needed.
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        loop {
            if let Some((reply, used)) = parse(&self.buf[self.start..self.end])? {
                self.start += used;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                return Ok(reply);
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let larger = self.buf.len() * 2;
            self.buf.resize(larger, 0);
        }
        let read = self.stream.read(&mut self.buf[self.end..])?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        self.end += read;
        Ok(())
    }
}

fn protocol_error(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad RESP: {what}"))
}

/// The line at the start of `buf` (without CRLF) and the bytes it took, if complete.
fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

fn parse_int(bytes: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol_error("integer"))
}

/// Parses one reply from the front of `buf`: `None` when it is not all there yet.
pub fn parse(buf: &[u8]) -> io::Result<Option<(Reply, usize)>> {
    let Some((&kind, _)) = buf.split_first() else {
        return Ok(None);
    };
    let Some((text, header)) = line(&buf[1..]) else {
        return Ok(None);
    };
    let header = header + 1;
    let reply = match kind {
        b'+' => Reply::Status(text.to_vec()),
        b'-' => Reply::Error(String::from_utf8_lossy(text).into_owned()),
        b':' => Reply::Integer(parse_int(text)?),
        b'$' => {
            let len = parse_int(text)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, header)));
            }
            let len = usize::try_from(len).map_err(|_| protocol_error("bulk length"))?;
            if buf.len() < header + len + 2 {
                return Ok(None);
            }
            return Ok(Some((
                Reply::Bulk(buf[header..header + len].to_vec()),
                header + len + 2,
            )));
        }
        b'*' => {
            let len = parse_int(text)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, header)));
            }
            let mut items = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
            let mut used = header;
            for _ in 0..len {
                match parse(&buf[used..])? {
                    Some((item, n)) => {
                        items.push(item);
                        used += n;
                    }
                    None => return Ok(None),
                }
            }
            return Ok(Some((Reply::Array(items), used)));
        }
        _ => return Err(protocol_error("unknown reply type")),
    };
    Ok(Some((reply, header)))
}
