//! The Lua-free owner checks some servers have natively — Valkey 9's `DELIFEQ` and
//! `SET … IFEQ`, Redis 8.4's `DELEX … IFEQ` — found out at run time by trying each
//! once on a key that does not exist (a version table would go stale, and forks
//! report other servers' version numbers: Valkey 9.1 says `redis_version:7.2.4`).
//! What was found (`Natives`) is part of the results; which recipes need which is
//! here, beside the probes.

use std::io;

use testkit::resp::{Conn, Reply};

use crate::measure::recipes::Command;
use crate::results::machine::Natives;

/// Never created: every probe is a miss, so it changes nothing.
const PROBE_KEY: &[u8] = b"fencelock-bench:probe";

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
}
