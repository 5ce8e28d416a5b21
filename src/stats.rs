//! Counters since start, shown by `INFO fencelock`.

use std::sync::atomic::{AtomicU64, Ordering};

/// One monotonically increasing counter. Only Redis's main thread counts (commands,
/// timers, events), so a count is a load and a store, not a locked add on every
/// command. (The gauges below may go down on the thread that frees values lazily, and
/// stay locked adds.)
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    pub fn bump(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        let now = self.0.load(Ordering::Relaxed);
        self.0.store(now.wrapping_add(n), Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Every counter, for `CONFIG RESETSTAT` (gauges stay: they say what is, not what was).
const COUNTERS: [&Counter; 25] = [
    &ACQUIRED,
    &CONTENDED,
    &RELEASED,
    &REFRESHED,
    &EXPIRED,
    &EVICTED,
    &EVICTED_MARKS,
    &HANDOFFS,
    &HANDOFF_LOOKS,
    &BLOCK_TIMEOUTS,
    &GUARDED,
    &GUARD_REFUSED,
    &FENCED,
    &FENCED_STALE,
    &KEEPALIVES,
    &KEPT_ALIVE,
    &CLOSES,
    &DEADLOCKS,
    &PROCLAIMS,
    &OBSERVED,
    &ONCE_RUNS,
    &ONCE_RETRIES,
    &ONCE_REPLAYS,
    &ONCE_DONE,
    &ONCE_FINGERPRINT_REFUSED,
];

/// `CONFIG RESETSTAT`: every counter starts again from 0, as Redis's own do.
pub fn reset_counters() {
    for counter in COUNTERS {
        counter.reset();
    }
}

/// Grants, including handoffs to waiters.
pub static ACQUIRED: Counter = Counter::new();
/// Acquire attempts answered busy (nil) without waiting.
pub static CONTENDED: Counter = Counter::new();
pub static RELEASED: Counter = Counter::new();
pub static REFRESHED: Counter = Counter::new();
/// Leases that ran out while held.
pub static EXPIRED: Counter = Counter::new();
/// Lock keys the server evicted under `maxmemory` (handled as a `DEL`).
pub static EVICTED: Counter = Counter::new();
/// Fence marks the server evicted under `maxmemory` (each raised the mark floor).
pub static EVICTED_MARKS: Counter = Counter::new();
/// Grants made to a waiting client on release, expiry or deletion.
pub static HANDOFFS: Counter = Counter::new();
/// Keys looked at by the turns of waits for several keys (each queue checked for who
/// stands first, each key opened for a decision): the work of their handoffs, which
/// stays a few looks a key whatever order the keys are freed in.
pub static HANDOFF_LOOKS: Counter = Counter::new();
/// Waiters answered nil because their BLOCK timeout passed.
pub static BLOCK_TIMEOUTS: Counter = Counter::new();
/// `LOCK.GUARD` calls whose token held the lock (the command ran).
pub static GUARDED: Counter = Counter::new();
/// `LOCK.GUARD` calls refused with NOTHELD.
pub static GUARD_REFUSED: Counter = Counter::new();
/// `LOCK.FENCED` calls admitted (the command ran).
pub static FENCED: Counter = Counter::new();
/// `LOCK.FENCED` calls refused with STALE.
pub static FENCED_STALE: Counter = Counter::new();

/// `LOCK.KEEPALIVE` calls, and the holdings they kept.
pub static KEEPALIVES: Counter = Counter::new();
pub static KEPT_ALIVE: Counter = Counter::new();
/// `LOCK.CLOSE` calls.
pub static CLOSES: Counter = Counter::new();
/// Waits refused because they would have closed a cycle (`DEADLOCK`).
pub static DEADLOCKS: Counter = Counter::new();
/// `LOCK.PROCLAIM` calls that changed a holder's value.
pub static PROCLAIMS: Counter = Counter::new();
/// Blocked `LOCK.OBSERVE` calls answered because the lock's state changed.
pub static OBSERVED: Counter = Counter::new();
/// Runs granted by `LOCK.ONCE` (a claim that found nobody running or done).
pub static ONCE_RUNS: Counter = Counter::new();
/// Of those, runs granted to a waiting duplicate after the run before it ended without
/// `LOCK.DONE` (a retry after a failed attempt).
pub static ONCE_RETRIES: Counter = Counter::new();
/// Duplicates answered with a stored result (at once, or when `LOCK.DONE` ended their wait).
pub static ONCE_REPLAYS: Counter = Counter::new();
/// Results stored by `LOCK.DONE`.
pub static ONCE_DONE: Counter = Counter::new();
/// Claims refused because the key was claimed with another fingerprint.
pub static ONCE_FINGERPRINT_REFUSED: Counter = Counter::new();

/// Lock values currently in the keyspace (held locks, counting leases Redis has not
/// yet reclaimed). Raised when a value is created, lowered when Redis frees one, which
/// may happen on a lazy-free thread, hence the atomic.
pub static LIVE_LOCKS: Gauge = Gauge::new();
/// Of those values, run-once done records: stored results, which hold no lease. INFO's
/// `held_locks` leaves them out and shows them as `once_done_records`.
pub static ONCE_DONE_RECORDS: Gauge = Gauge::new();

pub struct Gauge(std::sync::atomic::AtomicI64);

impl Gauge {
    const fn new() -> Self {
        Self(std::sync::atomic::AtomicI64::new(0))
    }

    pub fn up(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn down(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed).max(0)
    }
}
