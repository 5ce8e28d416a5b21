//! Fields of `INFO` sections, read the same way over a `redis` crate connection or a
//! raw RESP client (a test holding only a raw client, e.g. one next to a blocked
//! waiter, reads its server's memory as one holding a connection does).

use redis::{cmd, Connection};

use crate::resp::{RawClient, Reply};

/// A connection that can run `INFO section`.
pub trait InfoSource {
    /// The text of `INFO section`, or `None` when the server does not answer it.
    fn info_text(&mut self, section: &str) -> Option<String>;
}

impl InfoSource for Connection {
    fn info_text(&mut self, section: &str) -> Option<String> {
        cmd("INFO").arg(section).query(self).ok()
    }
}

impl InfoSource for RawClient {
    fn info_text(&mut self, section: &str) -> Option<String> {
        match self.call_str(&["INFO", section]) {
            Reply::Bulk(Some(text)) => Some(String::from_utf8_lossy(&text).into_owned()),
            _ => None,
        }
    }
}

/// Value of one field of an INFO section, e.g. `info_field(con, "fencelock", "fencelock_acquired")`.
pub fn info_field(con: &mut impl InfoSource, section: &str, field: &str) -> Option<String> {
    let info = con.info_text(section)?;
    info.lines().find_map(|line| {
        line.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// `used_memory` of `INFO memory`, in bytes.
pub fn used_memory(con: &mut impl InfoSource) -> i64 {
    info_field(con, "memory", "used_memory")
        .and_then(|v| v.parse().ok())
        .expect("used_memory")
}
