//! Summary statistics: median with min–max over repetitions, latency percentiles (an
//! HdrHistogram of waits in microseconds) and Jain's fairness index; and how figures
//! are written in report.json, where JSON has no NaN (a figure of nothing measured).

use hdrhistogram::Histogram;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Median and range of a set of repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    #[serde(with = "nullable")]
    pub median: f64,
    #[serde(with = "nullable")]
    pub min: f64,
    #[serde(with = "nullable")]
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

/// One figure that may be NaN (nothing measured, no `/proc` to read): written as
/// `null`, read back as NaN, so that a file round-trips (`#[serde(with = "nullable")]`).
pub mod nullable {
    use super::*;

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        x.is_finite().then_some(*x).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

/// A list of figures, each as `nullable` writes it.
pub mod nullable_each {
    use super::*;

    pub fn serialize<S: Serializer>(xs: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(xs.iter().map(|x| x.is_finite().then_some(*x)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let xs = Vec::<Option<f64>>::deserialize(d)?;
        Ok(xs.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
    }
}

/// One figure per repetition, written with its summary beside it for whoever reads
/// the file (`{"samples": [...], "summary": {"median", "min", "max"}}`); only the
/// samples are read back, the summary being theirs.
pub mod summarised {
    use super::*;

    #[derive(Serialize)]
    struct Written<'a> {
        #[serde(with = "nullable_each")]
        samples: &'a [f64],
        summary: Spread,
    }

    #[derive(Deserialize)]
    struct Read {
        #[serde(with = "nullable_each")]
        samples: Vec<f64>,
    }

    pub fn serialize<S: Serializer>(samples: &[f64], s: S) -> Result<S::Ok, S::Error> {
        Written {
            samples,
            summary: spread(samples),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        Ok(Read::deserialize(d)?.samples)
    }
}
