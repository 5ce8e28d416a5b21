//! The node-wide fence clock shared by every key on this server, the floor of evicted
//! fence marks, and what restores them.
//!
//! Redis runs module commands, loading and callbacks on its main thread, so the clock
//! is one atomic number (its last fence) rather than a mutex, which cost every grant a
//! lock and an unlock. It only ever rises (`fetch_max`), whatever happens.

use std::sync::atomic::{AtomicU64, Ordering};

use fencelock_core::fence_clock::FenceClock;

/// The highest fence issued or observed (`FenceClock::last`).
static LAST_FENCE: AtomicU64 = AtomicU64::new(0);

/// The highest fence of any mark the server evicted: a missing mark admits nothing
/// below it. Only ever rises (like the clock, it is saved, replicated and rewritten).
static MARK_FLOOR: AtomicU64 = AtomicU64::new(0);

/// Runs `decide` with the clock (a grant issues a fence inside it); what it issued is
/// kept. Only the main thread issues fences, so nothing issues one meanwhile.
pub fn with_clock<T>(decide: impl FnOnce(&mut FenceClock) -> T) -> T {
    let before = LAST_FENCE.load(Ordering::Relaxed);
    let mut clock = FenceClock::resumed(before);
    let decided = decide(&mut clock);
    if clock.last() > before {
        LAST_FENCE.fetch_max(clock.last(), Ordering::Relaxed);
    }
    decided
}

/// Raises the clock past a fence seen on disk, in a replicated effect or in aux data.
pub fn observe(fence: u64) {
    LAST_FENCE.fetch_max(fence, Ordering::Relaxed);
}

/// The highest fence issued or observed, persisted as RDB aux data.
pub fn last() -> u64 {
    LAST_FENCE.load(Ordering::Relaxed)
}

/// The floor a missing mark holds fences to.
pub fn mark_floor() -> u64 {
    MARK_FLOOR.load(Ordering::Relaxed)
}

/// Raises the floor to `fence` (a mark holding it was evicted, or the floor was
/// loaded or replicated); whether it rose.
pub fn raise_mark_floor(fence: u64) -> bool {
    MARK_FLOOR.fetch_max(fence, Ordering::Relaxed) < fence
}
