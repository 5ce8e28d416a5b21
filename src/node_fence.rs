//! The node-wide fence clock shared by every key on this server, and what restores it.
//!
//! Redis runs module commands, loading and callbacks on its main thread; the mutex only
//! keeps Rust honest about the static. A poisoned lock still holds a valid clock, so it
//! is recovered rather than propagated as a panic into Redis.

use std::sync::{Mutex, MutexGuard};

use fencelock_core::fence::FenceClock;

static CLOCK: Mutex<FenceClock> = Mutex::new(FenceClock::new());

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
