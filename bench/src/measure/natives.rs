//! The Lua-free owner checks some servers have natively — Valkey 9's `DELIFEQ` and
//! `SET … IFEQ`, Redis 8.4's `DELEX … IFEQ` — found out at run time by trying each
//! once on a key that does not exist (a version table would go stale, and forks
//! report other servers' version numbers: Valkey 9.1 says `redis_version:7.2.4`).

use std::io;

use testkit::resp::{Conn, Reply};

use crate::measure::recipes::Command;

/// Never created: every probe is a miss, so it changes nothing.
const PROBE_KEY: &[u8] = b"fencelock-bench:probe";

/// Which native owner checks the server under test accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Natives {
    /// `DELIFEQ key value`: delete if the value equals.
    pub delifeq: bool,
    /// `DELEX key IFEQ value`.
    pub delex_ifeq: bool,
    /// `SET key value IFEQ value PX ms`: set (and so re-arm the lease) if equal.
    pub set_ifeq: bool,
}

/// A miss answers 0 or nil; an unknown command or option answers an error.
fn accepted(reply: &Reply) -> bool {
    !matches!(reply, Reply::Error(_))
}

impl Natives {
    pub fn detect(conn: &mut Conn) -> io::Result<Self> {
        let mut tries = |argv: &[&[u8]]| conn.call(argv).map(|reply| accepted(&reply));
        Ok(Self {
            delifeq: tries(&[b"DELIFEQ", PROBE_KEY, b"x"])?,
            delex_ifeq: tries(&[b"DELEX", PROBE_KEY, b"IFEQ", b"x"])?,
            set_ifeq: tries(&[b"SET", PROBE_KEY, b"x", b"IFEQ", b"x", b"PX", b"1000"])?,
        })
    }

    /// Whether the server can run `command` (the native ones need their command).
    pub fn has(&self, command: Command) -> bool {
        match command {
            Command::DelIfEq | Command::NativeCycle => self.delifeq,
            Command::DelexIfEq => self.delex_ifeq,
            Command::SetIfEq => self.set_ifeq,
            _ => true,
        }
    }

    /// For the report: the native commands found, or that there are none.
    pub fn describe(&self) -> String {
        let found: Vec<&str> = [
            (self.delifeq, "DELIFEQ"),
            (self.delex_ifeq, "DELEX … IFEQ"),
            (self.set_ifeq, "SET … IFEQ"),
        ]
        .iter()
        .filter(|(has, _)| *has)
        .map(|(_, name)| *name)
        .collect();
        if found.is_empty() {
            "no native owner checks (DELIFEQ, DELEX … IFEQ, SET … IFEQ all refused)".into()
        } else {
            format!("native owner checks: {}", found.join(", "))
        }
    }
}
