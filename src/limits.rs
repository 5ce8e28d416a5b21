//! The limits every command checks, as set by the module configs (`config.rs`).
//! Pure: no Redis types, so the argument parser that reads them is testable alone.

use std::sync::atomic::{AtomicI64, Ordering};

/// Default longest lease: 30 days. Longer ttls are almost always a unit mistake
/// (seconds passed as milliseconds twice over), and a lock left that long is an outage.
pub const DEFAULT_MAX_TTL_MS: i64 = 30 * 24 * 60 * 60 * 1000;
/// Default bound on the clients waiting for one key.
pub const DEFAULT_MAX_WAITERS: i64 = 100_000;
/// Default longest client-chosen token, in bytes.
pub const DEFAULT_MAX_TOKEN_LENGTH: i64 = 256;

pub static MAX_TTL_MS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TTL_MS);
pub static MAX_WAITERS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_WAITERS);
pub static MAX_TOKEN_LENGTH: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TOKEN_LENGTH);

pub fn max_ttl_ms() -> i64 {
    MAX_TTL_MS.load(Ordering::Relaxed)
}

pub fn max_waiters() -> usize {
    usize::try_from(MAX_WAITERS.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

pub fn max_token_length() -> usize {
    usize::try_from(MAX_TOKEN_LENGTH.load(Ordering::Relaxed)).unwrap_or(0)
}
