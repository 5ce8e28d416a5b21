//! `INFO fencelock`: counters since start (or the last `CONFIG RESETSTAT`), the wait
//! and hold distributions, and the current gauges (section `fencelock_stats`, fields
//! prefixed `fencelock_`).

use std::ffi::{CStr, CString};

use crate::blocking;
use crate::durations;
use crate::ffi::info_section::Value;
use crate::ffi::server;
use crate::keyspace::sessions;
use crate::node_fence;
use crate::observing;
use crate::stats;

pub const SECTION: &CStr = c"stats";

/// The section's fields now.
pub fn fields() -> Vec<(&'static CStr, Value)> {
    let (waits, holds) = durations::summaries();
    let text = |summary: durations::Summary| {
        // Digits, `p`, `=`, `.` and `,` only: never an inner NUL.
        Value::Text(CString::new(summary.percentiles()).unwrap_or_default())
    };
    let mut fields: Vec<(&'static CStr, Value)> = counters()
        .into_iter()
        .map(|(name, value)| (name, Value::Int(value)))
        .collect();
    // Redis's latencystats format; the counts and sums let an exporter derive rates
    // and means.
    fields.extend([
        (c"wait_percentiles_usec", text(waits)),
        (c"waits", Value::Int(as_i64(waits.count))),
        (c"wait_usec_sum", Value::Int(as_i64(waits.sum_us))),
        (c"hold_percentiles_usec", text(holds)),
        (c"holds", Value::Int(as_i64(holds.count))),
        (c"hold_usec_sum", Value::Int(as_i64(holds.sum_us))),
    ]);
    fields
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The integer fields: counters, then gauges.
fn counters() -> Vec<(&'static CStr, i64)> {
    vec![
        (c"acquired", as_i64(stats::ACQUIRED.get())),
        (c"contended", as_i64(stats::CONTENDED.get())),
        (c"released", as_i64(stats::RELEASED.get())),
        (c"refreshed", as_i64(stats::REFRESHED.get())),
        (c"expired", as_i64(stats::EXPIRED.get())),
        (c"evicted", as_i64(stats::EVICTED.get())),
        (c"evicted_marks", as_i64(stats::EVICTED_MARKS.get())),
        (c"handoffs", as_i64(stats::HANDOFFS.get())),
        (c"handoff_looks", as_i64(stats::HANDOFF_LOOKS.get())),
        (c"block_timeouts", as_i64(stats::BLOCK_TIMEOUTS.get())),
        (c"guarded", as_i64(stats::GUARDED.get())),
        (c"guard_refused", as_i64(stats::GUARD_REFUSED.get())),
        (c"fenced", as_i64(stats::FENCED.get())),
        (c"fenced_stale", as_i64(stats::FENCED_STALE.get())),
        (c"keepalives", as_i64(stats::KEEPALIVES.get())),
        (c"kept_alive", as_i64(stats::KEPT_ALIVE.get())),
        (c"closes", as_i64(stats::CLOSES.get())),
        (c"deadlocks", as_i64(stats::DEADLOCKS.get())),
        (c"proclaims", as_i64(stats::PROCLAIMS.get())),
        (c"observed", as_i64(stats::OBSERVED.get())),
        (c"once_runs", as_i64(stats::ONCE_RUNS.get())),
        (c"once_retries", as_i64(stats::ONCE_RETRIES.get())),
        (c"once_replays", as_i64(stats::ONCE_REPLAYS.get())),
        (c"once_done", as_i64(stats::ONCE_DONE.get())),
        (
            c"once_fingerprint_refused",
            as_i64(stats::ONCE_FINGERPRINT_REFUSED.get()),
        ),
        (
            c"waiters",
            i64::try_from(blocking::total_waiters()).unwrap_or(i64::MAX),
        ),
        (
            c"observers",
            i64::try_from(observing::total()).unwrap_or(i64::MAX),
        ),
        // Lock values but done records, which hold no lease (counted on their own).
        (
            c"held_locks",
            stats::LIVE_LOCKS.get() - stats::ONCE_DONE_RECORDS.get(),
        ),
        (c"once_done_records", stats::ONCE_DONE_RECORDS.get()),
        // Sessions the index knows keys of (some may have just lost their last holding).
        (
            c"sessions",
            i64::try_from(sessions::count()).unwrap_or(i64::MAX),
        ),
        // The highest fence issued here or seen (loaded, replicated): a replica shows
        // how far the primary's grants reached it, which is what a promotion keeps.
        (c"fence_clock", as_i64(node_fence::last())),
        // A missing fence mark admits no fence below this (0 until a mark is evicted).
        (c"mark_floor", as_i64(node_fence::mark_floor())),
        // 1: maxmemory is set with a policy that may evict locks or fence marks.
        (c"eviction_possible", i64::from(server::eviction_possible())),
    ]
}
