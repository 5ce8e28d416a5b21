//! Persistence round trips: a server with the AOF on, written to before and after an
//! AOF rewrite, killed and started again on the same files, then read back. The
//! compatibility tests of each feature (locks, sessions, shared holders, multi-key
//! grants) run their own writes and checks through [`aof_round_trip`], so the server's
//! settings and the order of rewrite, kill and restart are written once.

use std::time::Duration;

use redis::{cmd, Connection, Value};

use crate::info::info_field;
use crate::locks::eventually;
use crate::server::Server;

/// When [`aof_round_trip`] rewrites the AOF between its two writing steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewrite {
    /// Everything is in the appended part (or the preamble-less base of the first
    /// write).
    Never,
    /// `BGREWRITEAOF` after `before`: its writes are read back from the rewrite's base,
    /// `after`'s from the part appended since.
    Between,
}

/// One AOF round trip: a server with the AOF on and fsync on every write, RDB preamble
/// `preamble` (`yes` / `no`); `before` writes, the AOF is rewritten when `rewrite`
/// says so, `after` writes more and records what must come back, the server is killed
/// (no shutdown save) and restarted on its files, and `check` reads the restarted server.
pub fn aof_round_trip<A, B>(
    preamble: &str,
    rewrite: Rewrite,
    before: impl FnOnce(&Server, &mut Connection) -> A,
    after: impl FnOnce(&Server, &mut Connection, A) -> B,
    check: impl FnOnce(&mut Connection, B),
) {
    let args = aof_always(preamble);
    let mut server = Server::with_args(&args);
    let mut con = server.connect();
    let written = before(&server, &mut con);
    if rewrite == Rewrite::Between {
        rewrite_aof(&mut con, Duration::from_secs(10));
    }
    let expected = after(&server, &mut con, written);
    server.kill();
    server.restart();
    let mut con = server.connect();
    check(&mut con, expected);
}

/// `BGREWRITEAOF`, then waits up to `timeout` until the rewrite is done.
pub fn rewrite_aof(con: &mut Connection, timeout: Duration) {
    let _: Value = cmd("BGREWRITEAOF").query(con).expect("BGREWRITEAOF");
    eventually(timeout, "AOF rewrite", || {
        info_field(con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(con, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
}

/// AOF on, fsync on every write, with or without the RDB preamble (`yes` / `no`).
pub fn aof_always(preamble: &str) -> [&str; 6] {
    [
        "appendonly",
        "yes",
        "appendfsync",
        "always",
        "aof-use-rdb-preamble",
        preamble,
    ]
}
