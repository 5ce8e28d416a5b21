//! A command filter that sees every command's name just before it runs, for two
//! things the module cannot learn otherwise:
//!
//! - `MIGRATE` (cluster resharding): its deletion of a lock key on the source must not
//!   count as a release, as the lock is still held on the target. Redis announces it as
//!   a plain `del` event whose context does not name the command, so the filter records
//!   whether the running command is `MIGRATE`. (One queued in `MULTI` runs under `EXEC`
//!   and is not recognised.)
//! - `SYNC`/`PSYNC`: a replica is attaching, and from now on the replication stream
//!   has a reader (see `keyspace::propagation`). The filter runs before Redis creates the
//!   replication backlog, so no effect is missed.
//! - `CLIENT UNBLOCK id` aimed at a waiter that was just handed the lock but not yet
//!   answered: Redis 7.0 would drop the grant and leave that client without any reply.
//!   The lock is already its own, so for it the command becomes a no-op (`0`, as for a
//!   client that is not blocked), with the id replaced by one no client has. (One
//!   queued in `MULTI` is seen only when queued; there the handoff waits for the end
//!   of the transaction instead, see `blocking::hand_off`.)
//! - The start of each command ends the note of an unlinked lock
//!   (`keyspace::unlinked`), so an overwrite is never taken for a later expiry.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::blocking;
use crate::keyspace::{propagation, unlinked};
use crate::rm::filter::FilteredCommand;

static RUNNING_MIGRATE: AtomicBool = AtomicBool::new(false);

/// Whether the command being executed is `MIGRATE`.
pub fn running_migrate() -> bool {
    RUNNING_MIGRATE.load(Ordering::Relaxed)
}

/// The filter: runs before every command.
pub fn before_command(command: &mut FilteredCommand) {
    unlinked::forget();
    let name = command.arg(0);
    RUNNING_MIGRATE.store(name.eq_ignore_ascii_case(b"migrate"), Ordering::Relaxed);
    if name.eq_ignore_ascii_case(b"psync") || name.eq_ignore_ascii_case(b"sync") {
        propagation::replication_started();
    }
    if name.eq_ignore_ascii_case(b"client") && command.arg(1).eq_ignore_ascii_case(b"unblock") {
        spare_answered_waiter(command);
    }
}

/// An id no client has (`CLIENT UNBLOCK` then answers 0, as for a client that is not
/// blocked).
const NO_CLIENT: &[u8] = b"-1";

/// `CLIENT UNBLOCK <id> …` aimed at a waiter whose grant is on its way: aim it at no one.
fn spare_answered_waiter(command: &mut FilteredCommand) {
    let id = std::str::from_utf8(command.arg(2))
        .ok()
        .and_then(|id| id.parse::<u64>().ok());
    if id.is_some_and(blocking::reply_pending) {
        command.replace(2, NO_CLIENT);
    }
}
