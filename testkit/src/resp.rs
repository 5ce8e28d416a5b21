//! The one RESP2 codec of the tests and the benchmark: an encoder that appends to a
//! caller's buffer (a whole pipeline goes out in one write), an incremental parser, a
//! blocking connection (`Conn`, `io::Result` everywhere: the benchmark's load generator)
//! and a raw client that panics on I/O errors (`RawClient`: tests that assert replies
//! byte for byte and send arbitrary binary argv).
//!
//! Hand-written rather than a client library because the load generator must stay
//! cheaper than the server it loads, and tests must see replies exactly as sent.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One reply as it came off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    /// The whole error line without the leading `-`.
    Error(String),
    Integer(i64),
    /// `None` is the nil bulk string.
    Bulk(Option<Vec<u8>>),
    /// `None` is the nil array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Status(s) if s == "OK")
    }

    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Bulk(None) | Reply::Array(None))
    }

    pub fn integer(&self) -> Option<i64> {
        match self {
            Reply::Integer(n) => Some(*n),
            _ => None,
        }
    }

    pub fn bulk(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(Some(bytes)) => Some(bytes),
            _ => None,
        }
    }

    /// The `[token, fence]` of a granted `LOCK.ACQUIRE`.
    pub fn grant(&self) -> Option<(&[u8], i64)> {
        match self {
            Reply::Array(Some(items)) => match items.as_slice() {
                [Reply::Bulk(Some(token)), Reply::Integer(fence)] => Some((token, *fence)),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Appends one command in RESP multibulk form.
/// An error reply with exactly `text`.
pub fn err(text: &str) -> Reply {
    Reply::Error(text.to_string())
}

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
        b'+' => Reply::Status(String::from_utf8_lossy(text).into_owned()),
        b'-' => Reply::Error(String::from_utf8_lossy(text).into_owned()),
        b':' => Reply::Integer(parse_int(text)?),
        b'$' => {
            let len = parse_int(text)?;
            if len < 0 {
                return Ok(Some((Reply::Bulk(None), header)));
            }
            let len = usize::try_from(len).map_err(|_| protocol_error("bulk length"))?;
            if buf.len() < header + len + 2 {
                return Ok(None);
            }
            return Ok(Some((
                Reply::Bulk(Some(buf[header..header + len].to_vec())),
                header + len + 2,
            )));
        }
        b'*' => {
            let len = parse_int(text)?;
            if len < 0 {
                return Ok(Some((Reply::Array(None), header)));
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
            return Ok(Some((Reply::Array(Some(items)), used)));
        }
        _ => return Err(protocol_error("unknown reply type")),
    };
    Ok(Some((reply, header)))
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
            buf: vec![0; 16 * 1024],
            start: 0,
            end: 0,
        })
    }

    pub fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))
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
            if let Some(reply) = self.buffered_reply()? {
                return Ok(reply);
            }
            self.fill()?;
        }
    }

    /// The next reply if one arrives within `wait`; `Ok(None)` when none did.
    pub fn try_read_reply(&mut self, wait: Duration) -> io::Result<Option<Reply>> {
        if let Some(reply) = self.buffered_reply()? {
            return Ok(Some(reply));
        }
        let normal = self.stream.read_timeout()?;
        self.stream.set_read_timeout(Some(wait))?;
        let filled = self.fill();
        self.stream.set_read_timeout(normal)?;
        match filled {
            Ok(()) => self.read_reply().map(Some),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn buffered_reply(&mut self) -> io::Result<Option<Reply>> {
        let Some((reply, used)) = parse(&self.buf[self.start..self.end])? else {
            return Ok(None);
        };
        self.start += used;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(Some(reply))
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

/// A test's raw client: `Conn` with every I/O failure a test failure.
pub struct RawClient {
    conn: Conn,
}

impl RawClient {
    pub fn connect(port: u16) -> Self {
        let conn = Conn::connect(port).expect("connect");
        conn.set_read_timeout(Duration::from_secs(10))
            .expect("timeout");
        RawClient { conn }
    }

    pub fn send(&mut self, argv: &[&[u8]]) {
        let mut frame = Vec::new();
        encode(&mut frame, argv);
        self.conn.send(&frame).expect("write");
    }

    /// Sends every command in one write, as a pipelining client does.
    pub fn send_pipeline(&mut self, commands: &[&[&str]]) {
        let mut frame = Vec::new();
        for argv in commands {
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            encode(&mut frame, &argv);
        }
        self.conn.send(&frame).expect("write");
    }

    pub fn call(&mut self, argv: &[&[u8]]) -> Reply {
        self.send(argv);
        self.read_reply()
    }

    /// `call` with string arguments.
    pub fn call_str(&mut self, argv: &[&str]) -> Reply {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        self.call(&argv)
    }

    pub fn read_reply(&mut self) -> Reply {
        self.conn.read_reply().expect("read reply")
    }

    /// The next reply if one arrives within `wait`, else `None`: tells a hung client
    /// from a slow one.
    pub fn try_read_reply(&mut self, wait: Duration) -> Option<Reply> {
        self.conn.try_read_reply(wait).expect("read reply")
    }
}
