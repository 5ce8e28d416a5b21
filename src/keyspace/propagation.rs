//! Whether anything reads the replication stream, which decides how a lock change is
//! propagated.
//!
//! Effects (`LOCK.APPLY … PXAT …`, `PEXPIREAT`, `DEL`) make replicas and the AOF exact,
//! but building them costs as much as the rest of an acquire. Redis itself drops every
//! propagated command when there is no AOF and no replication backlog, so while that is
//! so the command is propagated verbatim instead: nothing reads it, and it still counts
//! as a change for `save` rules. The moment an AOF is on, or a replica has ever started
//! to sync (the backlog outlives its last replica), effects are used, for good.

use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::Context;

use crate::ffi::server;

/// Set once a replica started syncing, this server was a replica, the server reported
/// a backlog or replicas, or it wrote an AOF; never cleared.
static REPLICATION_SEEN: AtomicBool = AtomicBool::new(false);

/// A replica is attaching (seen by the command filter before Redis handles it).
pub fn replication_started() {
    REPLICATION_SEEN.store(true, Ordering::Relaxed);
}

/// Whether this change must be propagated as explicit effects.
pub fn effects_needed(ctx: &Context) -> bool {
    // Outside a command (timers, callbacks) there is no client command to propagate
    // verbatim: use effects. No context flags are read here: an AOF or a replica role
    // has already set `REPLICATION_SEEN` (`check_server`, `check_aof`), and reading
    // them cost a refresh or a release more than anything else it asked the server.
    REPLICATION_SEEN.load(Ordering::Relaxed) || !server::in_command(ctx)
}

/// Asks the server (at load, after loading data, on a role change) whether it already
/// has replicas, a replication backlog, or a primary, or writes an AOF.
pub fn check_server(ctx: &Context) {
    if server::replicates(ctx) {
        replication_started();
    }
    check_aof(ctx);
}

/// Asks the server (at load and after every `CONFIG SET`, the only way to turn the
/// AOF on while it runs) whether it writes an AOF or is a replica; from the first yes on,
/// effects are used.
pub fn check_aof(ctx: &Context) {
    if server::aof_or_replica(ctx) {
        replication_started();
    }
}
