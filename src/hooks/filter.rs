//! A command filter that sees every command's name just before it runs, for what the
//! module cannot learn otherwise:
//!
//! - `MIGRATE` (cluster resharding): its deletion of a lock key on the source must not
//!   count as a release, as the lock is still held on the target. Redis announces it as
//!   a plain `del` event whose context does not name the command, so the filter records
//!   whether the running command is `MIGRATE`. (One queued in `MULTI` runs under `EXEC`
//!   and is not recognised.)
//! - `EXPIRE` and its kin with a time already past delete a key at once, and Redis 7.0
//!   and 8.2 announce that as `del` too: a fence mark lost that way still raises the
//!   mark floor (only `DEL` forgets a mark on purpose). (One queued in `MULTI` is not
//!   recognised, as for `MIGRATE`.)
//! - `SYNC`/`PSYNC`: a replica is attaching, and from now on the replication stream
//!   has a reader (see `keyspace::propagation`). The filter runs before Redis creates the
//!   replication backlog, so no effect is missed.
//! - `CLIENT UNBLOCK id` aimed at a waiter that was just handed the lock but not yet
//!   answered: Redis 7.0 would drop the grant and leave that client without any reply.
//!   The lock is already its own, so for it the command becomes a no-op (`0`, as for a
//!   client that is not blocked), with the id replaced by one no client has. (One
//!   queued in `MULTI` is seen only when queued; there the handoff waits for the end
//!   of the transaction instead, see `blocking::hand_off`.)
//! - `CONFIG RESETSTAT` (Redis 7.0 has no module event for it): the filter notes the
//!   server's statistics that only a reset sets back (`ffi::server::RESET_MARKS`:
//!   commands processed, bytes read, reads, connections received) when it sees one,
//!   and the module's counters and distributions are reset with the server's own once
//!   the event loop finds any of them gone back (`hooks::server::event_loop`): only a
//!   reset the server ran makes one smaller. So neither a user the ACL refuses
//!   `CONFIG`, nor one queued in a `MULTI` that is discarded or whose `EXEC` fails,
//!   resets them. (One queued in `MULTI` whose `EXEC` comes in a later turn of the
//!   event loop is not recognised.)
//! - The start of each command ends the note of an unlinked lock
//!   (`keyspace::unlinked`), so an overwrite is never taken for a later expiry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::blocking;
use crate::ffi::filter::FilteredCommand;
use crate::ffi::server;
use crate::keyspace::{propagation, unlinked};

static RUNNING_MIGRATE: AtomicBool = AtomicBool::new(false);
static RUNNING_EXPIRE: AtomicBool = AtomicBool::new(false);
/// The server's `RESET_MARKS` when the first `CONFIG RESETSTAT` since the last
/// `take_resetstat` was seen (None: none was). Only the main thread runs the filter and
/// the event loop's hook; the lock is never contended.
static RESETSTAT_BASELINE: Mutex<Option<[u64; server::RESET_MARKS.len()]>> = Mutex::new(None);

fn baseline() -> MutexGuard<'static, Option<[u64; server::RESET_MARKS.len()]>> {
    RESETSTAT_BASELINE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Whether a `CONFIG RESETSTAT` seen since the last call (which forgets it) was run by
/// the server: one of the statistics it sets back is smaller now than when it was seen.
pub fn take_resetstat() -> bool {
    let Some(before) = baseline().take() else {
        return false;
    };
    server::reset_marks()
        .is_some_and(|now| now.iter().zip(before).any(|(now, before)| *now < before))
}

/// A `CONFIG RESETSTAT` is about to run (or to be queued, or refused): the statistics it
/// would set back, kept from the first one of this turn (a later one may follow a
/// reset already made).
fn note_resetstat() {
    let mut baseline = baseline();
    if baseline.is_none() {
        *baseline = server::reset_marks();
    }
}

/// Whether the command being executed is `MIGRATE`.
pub fn running_migrate() -> bool {
    RUNNING_MIGRATE.load(Ordering::Relaxed)
}

/// Whether the command being executed sets an expiry (`EXPIRE` and its kin).
pub fn running_expire() -> bool {
    RUNNING_EXPIRE.load(Ordering::Relaxed)
}

/// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT`: with a time already past they delete
/// the key at once, which Redis 7.0 and 8.2 announce as `del`.
const EXPIRY_SETTERS: [&str; 4] = ["expire", "pexpire", "expireat", "pexpireat"];

fn sets_expiry(name: &[u8]) -> bool {
    matches!(name.first(), Some(b'e' | b'E' | b'p' | b'P'))
        && EXPIRY_SETTERS
            .iter()
            .any(|expire| name.eq_ignore_ascii_case(expire.as_bytes()))
}

/// The lengths of the command names the filter looks for.
const LOOKED_FOR_LENGTHS: std::ops::RangeInclusive<usize> = "sync".len()..="pexpireat".len();

/// The filter: runs before every command.
pub fn before_command(command: &mut FilteredCommand) {
    unlinked::forget();
    let name = command.arg(0);
    // Every name looked for here is 4 to 9 bytes long (`sync` to `pexpireat`): any
    // other command (every `LOCK.*` one, `GET`, `SET`) is settled by its length alone.
    if !LOOKED_FOR_LENGTHS.contains(&name.len()) {
        RUNNING_MIGRATE.store(false, Ordering::Relaxed);
        RUNNING_EXPIRE.store(false, Ordering::Relaxed);
        return;
    }
    RUNNING_MIGRATE.store(name.eq_ignore_ascii_case(b"migrate"), Ordering::Relaxed);
    RUNNING_EXPIRE.store(sets_expiry(name), Ordering::Relaxed);
    if name.eq_ignore_ascii_case(b"psync") || name.eq_ignore_ascii_case(b"sync") {
        propagation::replication_started();
    }
    if name.eq_ignore_ascii_case(b"config") && command.arg(1).eq_ignore_ascii_case(b"resetstat") {
        note_resetstat();
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

#[cfg(test)]
mod tests {
    use super::{EXPIRY_SETTERS, LOOKED_FOR_LENGTHS};

    #[test]
    fn every_name_looked_for_passes_the_length_check() {
        let others = ["migrate", "psync", "sync", "config", "client"];
        for name in EXPIRY_SETTERS.into_iter().chain(others) {
            assert!(LOOKED_FOR_LENGTHS.contains(&name.len()), "{name}");
        }
        for name in ["lock.acquire", "lock.release", "lock.refresh", "get", "set"] {
            assert!(!LOOKED_FOR_LENGTHS.contains(&name.len()), "{name}");
        }
    }
}
