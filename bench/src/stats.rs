//! Summary statistics: median with min–max over repetitions, latency percentiles (an
//! HdrHistogram of waits in microseconds) and Jain's fairness index.

use hdrhistogram::Histogram;

/// Median and range of a set of repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Median of a handful of repetitions (not worth a histogram: the middle one, or the
/// mean of the middle two, of the finite samples).
pub fn spread(samples: &[f64]) -> Spread {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let Some((&min, &max)) = sorted.first().zip(sorted.last()) else {
        return Spread {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
        };
    };
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    };
    Spread { median, min, max }
}

/// An empty histogram of waits in µs: 3 significant digits (exact below 2 ms, within
/// 0.1% above), growing as needed so no wait is ever out of range.
pub fn wait_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid precision")
}

/// Percentile `p` (0..=100, nearest rank) of a wait histogram, in ms; NaN when empty.
pub fn percentile_ms(waits: &Histogram<u64>, p: f64) -> f64 {
    if waits.is_empty() {
        f64::NAN
    } else {
        waits.value_at_percentile(p) as f64 / 1e3
    }
}

/// Jain's fairness index: (Σx)² / (n·Σx²). 1 when all equal, 1/n when one takes all.
pub fn jain(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    if values.is_empty() || squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (values.len() as f64 * squares)
}
