//! Scenario 3's results: one key contended for by clients in separate processes, per
//! (lock, client count, mechanism) one sample per repetition — grants/s, the wait from
//! ask to grant (its percentiles, and the histogram the chart draws), failed attempts
//! and Jain's index over per-client grants.

use hdrhistogram::Histogram;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::stats::{nullable, spread, wait_histogram, Spread};

/// What the clients contend for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Lock {
    /// One holder at a time.
    Mutex,
    /// At most `limit` holders at a time.
    Semaphore { limit: u32 },
}

impl Lock {
    pub fn label(self) -> String {
        match self {
            Lock::Mutex => "mutex".into(),
            Lock::Semaphore { limit } => format!("semaphore of {limit}"),
        }
    }
}

/// How a client asks: queued by the server (`LOCK.ACQUIRE … BLOCK`), or polling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mode {
    Block,
    Poll { retry_ms: u64 },
}

impl Mode {
    pub fn label(self) -> String {
        match self {
            Mode::Block => "fencelock BLOCK".into(),
            Mode::Poll { retry_ms } => format!("polling {retry_ms} ms"),
        }
    }
}

/// The mechanisms compared, in the order they are run and shown.
pub const MODES: [Mode; 3] = [
    Mode::Block,
    Mode::Poll { retry_ms: 50 },
    Mode::Poll { retry_ms: 5 },
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContentionResult {
    pub lock: Lock,
    pub clients: usize,
    #[serde(rename = "mechanism")]
    pub mode: Mode,
    #[serde(rename = "repetitions", with = "repetitions")]
    pub samples: Vec<Sample>,
}

/// One repetition of one (lock, clients, mode).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    #[serde(with = "nullable")]
    pub grants_per_s: f64,
    /// Wait percentiles in ms (NaN when nothing was granted).
    #[serde(rename = "wait_p50_ms", with = "nullable")]
    pub p50_ms: f64,
    #[serde(rename = "wait_p90_ms", with = "nullable")]
    pub p90_ms: f64,
    #[serde(rename = "wait_p99_ms", with = "nullable")]
    pub p99_ms: f64,
    #[serde(rename = "wait_max_ms", with = "nullable")]
    pub max_ms: f64,
    /// Waits recorded: one per grant, inside the timed window or not.
    pub wait_count: u64,
    #[serde(with = "nullable")]
    pub failed_per_grant: f64,
    #[serde(rename = "failed_attempts")]
    pub failed: u64,
    /// Releases that found the lease gone (never expected: ttl ≫ hold).
    #[serde(rename = "lost_leases")]
    pub lost: u64,
    #[serde(with = "nullable")]
    pub jain: f64,
    pub per_client_grants: Vec<u64>,
    /// Every wait of the run (ask to grant), in µs, for the chart. Not in report.json
    /// (thousands of buckets a sample, where the percentiles above say what the tables
    /// use): a sample read back from a file has an empty histogram.
    #[serde(skip, default = "wait_histogram")]
    pub waits: Histogram<u64>,
}

/// The repetitions of one (lock, clients, mode), written with the summary of each
/// column the tables show; only the repetitions are read back. Also the form of the
/// many-key contention's repetitions (scenario 8).
pub mod repetitions {
    use super::*;

    #[derive(Serialize)]
    struct Summary {
        grants_per_s: Spread,
        wait_p50_ms: Spread,
        wait_p99_ms: Spread,
        wait_max_ms: Spread,
        failed_per_grant: Spread,
        jain: Spread,
    }

    #[derive(Serialize)]
    struct Written<'a> {
        samples: &'a [Sample],
        summary: Summary,
    }

    #[derive(Deserialize)]
    struct Read {
        samples: Vec<Sample>,
    }

    pub fn serialize<S: Serializer>(samples: &[Sample], s: S) -> Result<S::Ok, S::Error> {
        let column = |f: fn(&Sample) -> f64| spread(&samples.iter().map(f).collect::<Vec<_>>());
        Written {
            samples,
            summary: Summary {
                grants_per_s: column(|s| s.grants_per_s),
                wait_p50_ms: column(|s| s.p50_ms),
                wait_p99_ms: column(|s| s.p99_ms),
                wait_max_ms: column(|s| s.max_ms),
                failed_per_grant: column(|s| s.failed_per_grant),
                jain: column(|s| s.jain),
            },
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Sample>, D::Error> {
        Ok(Read::deserialize(d)?.samples)
    }
}
