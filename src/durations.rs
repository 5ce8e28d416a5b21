//! How long clients waited for locks and held them: two fixed-size histograms of
//! microseconds (waits, holdings), each with its count and sum, shown by `INFO
//! fencelock` in the format of Redis's own `INFO latencystats`.
//!
//! Each histogram is made once, at load (`init`), covering 1 µs to `HIGHEST_US` with
//! two significant digits (Redis's latencystats keep the same precision): a reported
//! percentile is within 1% of the true one (HdrHistogram's bound for two digits is
//! 1/128 of the value). Recording only increments a counter in place: no allocation
//! per event. A value above `HIGHEST_US` (a wait with `BLOCK 0` that lasted weeks, a
//! lock made permanent) is counted as `HIGHEST_US`.
//!
//! Only Redis's main thread records (commands, timers, keyspace events), so the
//! histograms are that thread's (`ffi::main_thread`): no lock on the hot path.

use std::cell::RefCell;

use hdrhistogram::Histogram;

use crate::ffi::main_thread::MainThread;

/// 30 days in µs: the longest duration told apart from longer ones.
const HIGHEST_US: u64 = 30 * 24 * 3600 * 1_000_000;
/// Significant digits kept (Redis's `LATENCY_HISTOGRAM_PRECISION`).
const DIGITS: u8 = 2;

/// One distribution: its histogram, and the exact sum of what it recorded.
struct Distribution {
    histogram: Option<Histogram<u64>>,
    sum_us: u64,
}

impl Distribution {
    const fn new() -> Self {
        Self {
            histogram: None,
            sum_us: 0,
        }
    }

    fn ensure(&mut self) {
        if self.histogram.is_none() {
            self.histogram = Histogram::new_with_bounds(1, HIGHEST_US, DIGITS).ok();
        }
    }

    fn record(&mut self, us: u64) {
        let us = us.min(HIGHEST_US);
        if let Some(histogram) = &mut self.histogram {
            // 0 µs (a wait granted in the command that asked) has a bucket of its own.
            histogram.saturating_record(us);
            self.sum_us = self.sum_us.saturating_add(us);
        }
    }

    fn summary(&self) -> Summary {
        let Some(histogram) = &self.histogram else {
            return Summary::default();
        };
        let at = |quantile: f64| {
            if histogram.is_empty() {
                0
            } else {
                histogram.value_at_quantile(quantile)
            }
        };
        Summary {
            count: histogram.len(),
            sum_us: self.sum_us,
            p50_us: at(0.50),
            p99_us: at(0.99),
            p999_us: at(0.999),
        }
    }

    fn reset(&mut self) {
        if let Some(histogram) = &mut self.histogram {
            histogram.reset();
        }
        self.sum_us = 0;
    }
}

/// What `INFO` shows of one distribution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub sum_us: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
}

impl Summary {
    /// `p50=…,p99=…,p99.9=…` in µs with three decimals, as Redis writes
    /// `latency_percentiles_usec_<command>` (whose histograms count nanoseconds; these
    /// count whole microseconds, so the decimals are zeros).
    pub fn percentiles(&self) -> String {
        format!(
            "p50={}.000,p99={}.000,p99.9={}.000",
            self.p50_us, self.p99_us, self.p999_us
        )
    }
}

struct Recorder {
    waits: Distribution,
    holds: Distribution,
    /// While an RDB or AOF loads: an AOF replays releases and `LOCK.DONE`s whose
    /// holdings ended before the restart (or were counted already), so nothing is
    /// recorded until the load ends.
    loading: bool,
}

static RECORDER: MainThread<RefCell<Recorder>> = MainThread::new(|| {
    RefCell::new(Recorder {
        waits: Distribution::new(),
        holds: Distribution::new(),
        loading: false,
    })
});

fn with<T>(f: impl FnOnce(&mut Recorder) -> T) -> T {
    RECORDER.with(|recorder| f(&mut recorder.borrow_mut()))
}

/// Allocates both histograms (called once while the module loads, on the main thread).
pub fn init() {
    with(|recorder| {
        recorder.waits.ensure();
        recorder.holds.ensure();
    });
}

/// A wait ended (granted, timed out, refused, given up) after `us` microseconds.
pub fn wait_ended(us: u64) {
    with(|recorder| recorder.waits.record(us));
}

/// A holding ended (released, expired, evicted, deleted, closed, done) after `us`.
pub fn hold_ended(us: u64) {
    with(|recorder| {
        if !recorder.loading {
            recorder.holds.record(us);
        }
    });
}

/// An RDB or AOF began (`true`) or ended (`false`) loading.
pub fn set_loading(loading: bool) {
    with(|recorder| recorder.loading = loading);
}

/// How long a holding granted with `fence` has lasted at `now_us` (the fence is the
/// server's clock in µs at its grant, see `fence_clock`): 0 for a fence ahead of the
/// clock.
pub fn held_for_us(fence: u64, now_us: u64) -> u64 {
    now_us.saturating_sub(fence)
}

/// A holding that began at `start_us` (its fence, or the start the index of held keys
/// kept for it) ended at `end_us`.
pub fn holding_ended_now(start_us: u64, end_us: u64) {
    hold_ended(held_for_us(start_us, end_us));
}

/// The waits' and the holdings' summaries now.
pub fn summaries() -> (Summary, Summary) {
    with(|recorder| (recorder.waits.summary(), recorder.holds.summary()))
}

/// `CONFIG RESETSTAT`: both distributions start again from nothing.
pub fn reset() {
    with(|recorder| {
        recorder.waits.reset();
        recorder.holds.reset();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_counts_and_sums_follow_what_was_recorded() {
        let mut distribution = Distribution::new();
        assert_eq!(distribution.summary(), Summary::default(), "not made yet");
        distribution.ensure();
        for us in 1..=1000 {
            distribution.record(us);
        }
        let summary = distribution.summary();
        assert_eq!(summary.count, 1000);
        assert_eq!(summary.sum_us, 500_500);
        for (got, exact) in [
            (summary.p50_us, 500),
            (summary.p99_us, 990),
            (summary.p999_us, 999),
        ] {
            assert!(got.abs_diff(exact) * 100 <= exact, "{got} vs {exact}");
        }
        distribution.record(u64::MAX);
        assert_eq!(distribution.summary().count, 1001, "clamped, not lost");
        distribution.reset();
        assert_eq!(distribution.summary().count, 0);
        assert_eq!(distribution.summary().sum_us, 0);
    }

    #[test]
    fn the_format_is_redis_latencystats() {
        let summary = Summary {
            p50_us: 12,
            p99_us: 1003,
            p999_us: 2047,
            ..Summary::default()
        };
        assert_eq!(
            summary.percentiles(),
            "p50=12.000,p99=1003.000,p99.9=2047.000"
        );
    }

    #[test]
    fn a_holding_lasts_from_its_fence() {
        assert_eq!(held_for_us(1_000, 1_500), 500);
        assert_eq!(held_for_us(2_000, 1_500), 0, "a fence ahead of the clock");
    }
}
