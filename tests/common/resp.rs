//! A minimal raw RESP2 client, for asserting replies byte for byte (error texts exactly
//! as the server sends them) and for sending arbitrary binary argv.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One socket per client (10,000 waiters must fit in the file descriptor limit).
pub struct RawClient {
    reader: BufReader<TcpStream>,
}

/// One reply as it came off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    /// The whole error line without the leading `-`.
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl RawClient {
    pub fn connect(port: u16) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        RawClient {
            reader: BufReader::new(stream),
        }
    }

    pub fn send(&mut self, argv: &[&[u8]]) {
        let mut frame = format!("*{}\r\n", argv.len()).into_bytes();
        for arg in argv {
            frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            frame.extend_from_slice(arg);
            frame.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&frame).expect("write");
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

    /// The next reply if one arrives within `wait`, else `None` (the client is left
    /// with its normal read timeout again). Tells a hung client from a slow one.
    pub fn try_read_reply(&mut self, wait: Duration) -> Option<Reply> {
        let stream = self.reader.get_ref();
        stream.set_read_timeout(Some(wait)).expect("timeout");
        let arrived = self
            .reader
            .fill_buf()
            .map(|buf| !buf.is_empty())
            .unwrap_or(false);
        self.reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        arrived.then(|| self.read_reply())
    }

    /// Sends every command in one write, as a pipelining client does.
    pub fn send_pipeline(&mut self, commands: &[&[&str]]) {
        let mut frame = Vec::new();
        for argv in commands {
            frame.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
            for arg in *argv {
                frame.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
            }
        }
        self.reader.get_mut().write_all(&frame).expect("write");
    }

    fn read_line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read reply");
        assert!(line.ends_with("\r\n"), "truncated reply line {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    pub fn read_reply(&mut self) -> Reply {
        let line = self.read_line();
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Reply::Status(rest.to_string()),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Integer(rest.parse().expect("integer")),
            "$" => {
                let len: i64 = rest.parse().expect("bulk length");
                if len < 0 {
                    return Reply::Bulk(None);
                }
                let mut data = vec![0u8; usize::try_from(len).expect("len") + 2];
                self.reader.read_exact(&mut data).expect("bulk body");
                data.truncate(data.len() - 2);
                Reply::Bulk(Some(data))
            }
            "*" => {
                let len: i64 = rest.parse().expect("array length");
                if len < 0 {
                    return Reply::Array(None);
                }
                Reply::Array(Some((0..len).map(|_| self.read_reply()).collect()))
            }
            other => panic!("unexpected reply type {other:?} in {line:?}"),
        }
    }
}
