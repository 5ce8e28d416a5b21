//! Scenarios 1 and 2's results: the rates of each comparison (per-command throughput,
//! the lock and semaphore cycles) in one pipelining mode, one series per variant,
//! fencelock's first, one sample per repetition.

use serde::{Deserialize, Serialize};

use crate::stats::{nullable_each, summarised};

/// Labels of the native baselines (the targets and the chart look them up by label).
pub const DELIFEQ: &str = "DELIFEQ";
pub const DELEX_IFEQ: &str = "DELEX IFEQ";
pub const SET_IFEQ: &str = "SET IFEQ PX";
pub const NATIVE_CYCLE: &str = "SET NX PX + INCR + DELIFEQ";
/// Labels of the floor module's rows (`bench/floor`): fencelock's key work and nothing
/// else, the limit for any module.
pub const FLOOR_ACQUIRE: &str = "FLOOR.ACQUIRE";
pub const FLOOR_RELEASE: &str = "FLOOR.RELEASE";
pub const FLOOR_REFRESH: &str = "FLOOR.REFRESH";
/// Label of the semaphore cycle's baseline.
pub const ZSET_SEMAPHORE: &str = "ZSET Lua semaphore + ZREM";

/// Measured rates of one comparison in one pipelining mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupResult {
    /// Short name the targets look the comparison up by (`acquire`, `cycle`, …).
    #[serde(rename = "group")]
    pub id: String,
    pub title: String,
    pub unit: String,
    /// Commands in flight per connection (1 = unpipelined).
    #[serde(rename = "pipeline_depth")]
    pub depth: usize,
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    pub label: String,
    pub commands_per_op: u64,
    /// Operations per second, one per repetition.
    #[serde(rename = "per_second", with = "summarised")]
    pub samples: Vec<f64>,
    /// Operations retried because a random key was taken, summed over repetitions.
    #[serde(rename = "busy_retries")]
    pub busy: u64,
    /// Share of the run's wall time the server's event loop spent on a CPU, one per
    /// repetition: well below 1 in a pipelined run means the load generator, not the
    /// server, set the pace.
    #[serde(with = "nullable_each")]
    pub server_busy: Vec<f64>,
}
