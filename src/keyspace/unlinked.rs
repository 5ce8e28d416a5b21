//! The note of the lock key or fence mark Redis most recently unlinked.
//!
//! Redis tells a data type that one of its keys is being unlinked just before it
//! announces *why* (`expired`, `del`, `evicted`). The note is matched against the next
//! announcement, which is how an expired lease is told apart from an expired key of
//! another type, and an evicted mark from a deleted one: by then the key is already
//! gone. A note lives only as long as the command (or expiry or eviction cycle) that
//! made it: the command filter and the event loop going to sleep end it, so an
//! overwrite (`SET` over a lock, which Redis announces in a class the module does not
//! follow) is never taken for a later expiry.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::durations;
use crate::ffi::main_thread::MainThread;
use crate::ffi::server_clock;

/// What the unlinked key was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// A lock with this many holders (each one's lease ends with the key's when it
    /// expires).
    Lock { holders: usize },
    /// A fence mark that had admitted this fence.
    Mark { fence: u64 },
}

/// The key most recently unlinked, as (db, name), and what it was. The buffers are
/// reused so that noting a deletion does not allocate on every release.
struct Unlinked {
    db: i32,
    name: Vec<u8>,
    gone: Gone,
    /// Each of a lock's holdings when it was unlinked, as (start µs, end µs or 0 for
    /// "at the announcement"), for the hold distribution once Redis says the key expired
    /// or was deleted (a lease that ran out ends at its end, not when Redis deleted the
    /// key): no clock is read for the deletions the module makes itself.
    held: Vec<(u64, u64)>,
}

static LAST_UNLINKED: MainThread<RefCell<Unlinked>> = MainThread::new(|| {
    RefCell::new(Unlinked {
        db: 0,
        name: Vec::new(),
        gone: Gone::Lock { holders: 0 },
        held: Vec::new(),
    })
});

/// Whether the note holds a key not matched or forgotten yet. Kept apart from the note,
/// in a plain static: the command filter ends the note before every command, and a
/// static spares that the thread-local lookup (`__tls_get_addr` in a shared object).
/// Only Redis's main thread notes and reads it (a data type's unlink callback runs there).
static NOTED: AtomicBool = AtomicBool::new(false);

/// A lock key or mark is going away (a data type's unlink callback), with what `held`
/// adds of its holdings, as (start µs, end µs or 0 for "when announced"): one visit of
/// the note for both.
pub fn note(db: i32, name: &[u8], gone: Gone, held: impl FnOnce(&mut Vec<(u64, u64)>)) {
    LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        NOTED.store(true, Relaxed);
        last.db = db;
        last.gone = gone;
        last.name.clear();
        last.name.extend_from_slice(name);
        last.held.clear();
        held(&mut last.held);
    });
}

/// The module deleted the key itself (a release, the last holder leaving): the
/// holdings noted at its unlink ended now, and the note is used up.
pub fn deleted_by_us() {
    let now_us = server_clock::now_micros();
    LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        for &(start_us, end_us) in &last.held {
            durations::holding_ended_now(start_us, ended_at(end_us, now_us));
        }
        last.held.clear();
    });
    NOTED.store(false, Relaxed);
}

/// The holdings noted with the lock last taken (`take`) ended by `now_us` (those whose
/// lease ran out before, at their lease's end).
pub fn held_ended(now_us: u64) {
    LAST_UNLINKED.with(|last| {
        for &(start_us, end_us) in &last.borrow().held {
            durations::holding_ended_now(start_us, ended_at(end_us, now_us));
        }
    });
}

/// When a holding noted to end at `end_us` (0: not known) ended, seen at `now_us`.
fn ended_at(end_us: u64, now_us: u64) -> u64 {
    if end_us == 0 {
        now_us
    } else {
        end_us.min(now_us)
    }
}

/// The command (or cycle) that unlinked it is over, or the deletion was our own.
pub fn forget() {
    NOTED.store(false, Relaxed);
}

/// When the key Redis just announced is the one it just unlinked, what it was; the
/// note is used up either way.
pub fn take(db: i32, name: &[u8]) -> Option<Gone> {
    if !NOTED.swap(false, Relaxed) {
        return None;
    }
    LAST_UNLINKED.with(|last| {
        let last = last.borrow();
        (last.db == db && last.name == name).then_some(last.gone)
    })
}
