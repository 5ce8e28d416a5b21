//! The node-wide fence clock shared by every key on this server, the floor of evicted
//! fence marks, and what restores them.
//!
//! Redis runs module commands, loading and callbacks on its main thread; the mutex only
//! keeps Rust honest about the static. A poisoned lock still holds a valid clock, so it
//! is recovered rather than propagated as a panic into Redis.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use fencelock_core::fence_clock::FenceClock;

static CLOCK: Mutex<FenceClock> = Mutex::new(FenceClock::new());

/// The highest fence of any mark the server evicted: a missing mark admits nothing
/// below it. Only ever rises (like the clock, it is saved, replicated and rewritten).
static MARK_FLOOR: AtomicU64 = AtomicU64::new(0);

fn clock() -> MutexGuard<'static, FenceClock> {
    CLOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `decide` with exclusive access to the clock (a grant issues a fence inside it).
pub fn with_clock<T>(decide: impl FnOnce(&mut FenceClock) -> T) -> T {
    decide(&mut clock())
}

/// Raises the clock past a fence seen on disk, in a replicated effect or in aux data.
pub fn observe(fence: u64) {
    clock().observe(fence);
}

/// The highest fence issued or observed, persisted as RDB aux data.
pub fn last() -> u64 {
    clock().last()
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
