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

/// `used_memory` less what the normal clients' own buffers and structs take (the sum of
/// `tot-mem` in `CLIENT LIST TYPE normal`): the memory a blocked client costs beyond its
/// connection. Redis frees an idle client's query buffer on its cron a few seconds after
/// its last command, so `used_memory` alone counts a waiter's 16 KB buffer or not by how
/// long the machine took between the command and the reading.
pub fn memory_beyond_clients(con: &mut Connection) -> i64 {
    let list: String = cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query(con)
        .expect("CLIENT LIST");
    let clients: i64 = list
        .lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("tot-mem="))
                .and_then(|v| v.parse::<i64>().ok())
        })
        .sum();
    used_memory(con) - clients
}
