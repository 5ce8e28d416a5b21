//! Scenario 8's results: many keys at once (`LOCK.ACQUIREALL`). Three parts, each
//! with one sample per repetition, the variants of a part measured back to back:
//!
//! - the four-key cycle: `LOCK.ACQUIREALL` of 4 keys against 4 pipelined
//!   `LOCK.ACQUIRE`s under one token (each then released by 4 pipelined
//!   `LOCK.RELEASE`s), cycles/s, pipelined and unpipelined (`GroupResult`s, as
//!   scenario 1's);
//! - contention over overlapping 4-key sets of a small key space: `LOCK.ACQUIREALL …
//!   BLOCK` against a client-side multi-lock (one `LOCK.ACQUIRE` per key in the set's
//!   order, all given back and a jittered exponential backoff on a refusal), grants/s
//!   and the wait from ask to grant (`Sample`s, as scenario 3's);
//! - what an acquire that waits costs the server with deadlock detection on and off,
//!   with thousands of waiters already queued, in two shapes of the wait-for graph.
//!
//! The ratios are derived here, repetition by repetition, so that the targets and the
//! tables take them the same way.

use serde::{Deserialize, Serialize};

use crate::results::contention::{repetitions, Sample};
use crate::results::throughput::GroupResult;
use crate::stats::summarised;

/// Labels of the four-key cycle's two series (the targets look them up by label).
pub const ACQUIREALL_CYCLE: &str = "LOCK.ACQUIREALL 4 keys + 4 LOCK.RELEASE";
pub const PIPELINED_CYCLE: &str = "4 pipelined LOCK.ACQUIRE + 4 LOCK.RELEASE";

/// How a contending client asks for its set of keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// `LOCK.ACQUIREALL n k… ttl BLOCK timeout`: queued in every key's queue at once.
    AcquireAll,
    /// One `LOCK.ACQUIRE k ttl TOKEN t` per key in order, no `BLOCK`; on a refusal the
    /// keys taken are released and the client sleeps a jittered exponential backoff.
    MultiLock,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::AcquireAll, Mechanism::MultiLock];

    pub fn label(self) -> &'static str {
        match self {
            Mechanism::AcquireAll => "LOCK.ACQUIREALL … BLOCK",
            Mechanism::MultiLock => "client multi-lock, backoff",
        }
    }
}

/// One (client count, mechanism) of the contention part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MultiKeyContention {
    pub clients: usize,
    pub mechanism: Mechanism,
    #[serde(rename = "repetitions", with = "repetitions")]
    pub samples: Vec<Sample>,
}

/// What the contention part's clients did, the same for every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentionPlan {
    /// Keys the sets are drawn from.
    pub keyspace: u64,
    /// Keys in each set (distinct, drawn anew for every grant, in random order).
    pub keys_per_set: u64,
    pub duration_ms: u64,
    pub think_max_ms: f64,
    pub hold_ms: f64,
    /// The multi-lock's backoff after its n-th refusal in a row: uniform in
    /// 0..min(cap, base × 2^n).
    pub backoff_base_ms: f64,
    pub backoff_cap_ms: f64,
    pub block_timeout_ms: u64,
}

/// The shape of the wait-for graph the waiting acquires join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Every waiter on the one key the new acquires wait for.
    OneKey,
    /// Waiters spread over chains of keys, each key's holder waiting for the next key
    /// of its chain.
    Chains,
}

impl Shape {
    pub const ALL: [Shape; 2] = [Shape::OneKey, Shape::Chains];

    pub fn label(self) -> &'static str {
        match self {
            Shape::OneKey => "all on the key waited for",
            Shape::Chains => "spread over chains of keys",
        }
    }
}

/// Waiting acquires joining one graph, detection on and off alternating.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitShape {
    pub shape: Shape,
    /// Waiters queued before the measured ones join (each its own connection).
    pub waiters: u64,
    /// Keys those waiters wait on.
    pub keys: u64,
    /// Owners one new acquire's search reaches (holders of the keys along its way):
    /// what detection has to walk.
    pub reach: u64,
    /// Server event-loop CPU per acquire that waits, µs, detection on.
    #[serde(rename = "detection_on_server_cpu_us", with = "summarised")]
    pub on_us: Vec<f64>,
    #[serde(rename = "detection_off_server_cpu_us", with = "summarised")]
    pub off_us: Vec<f64>,
    /// `INFO commandstats` time per acquire that waits (inside the command only, wall
    /// clock: it also counts time the server was off its CPU), µs.
    #[serde(rename = "detection_on_command_us", with = "summarised")]
    pub on_command_us: Vec<f64>,
    #[serde(rename = "detection_off_command_us", with = "summarised")]
    pub off_command_us: Vec<f64>,
    /// The idle server's share of a CPU, taken off pro rata of each run's wall time.
    #[serde(with = "crate::stats::nullable")]
    pub idle_cpu_share: f64,
}

fn paired(numerator: &[f64], denominator: &[f64]) -> Vec<f64> {
    numerator
        .iter()
        .zip(denominator)
        .map(|(n, d)| n / d)
        .collect()
}

impl WaitShape {
    /// Server CPU per waiting acquire, detection on ÷ off, per repetition.
    pub fn ratio(&self) -> Vec<f64> {
        paired(&self.on_us, &self.off_us)
    }

    /// The same in the command's own time.
    pub fn command_ratio(&self) -> Vec<f64> {
        paired(&self.on_command_us, &self.off_command_us)
    }

    /// Server CPU detection adds to an acquire that waits, µs, per repetition.
    pub fn added_us(&self) -> Vec<f64> {
        self.on_us
            .iter()
            .zip(&self.off_us)
            .map(|(on, off)| on - off)
            .collect()
    }
}

/// The waiting-acquire part: its counts, and one result per shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitCost {
    /// Waiters planned (the measured count is each shape's `waiters`).
    pub planned_waiters: u64,
    /// Why fewer were measured, if they were (the open-files limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped: Option<String>,
    /// Connections that join the queue (and are unblocked again) in each round.
    pub joiners: u64,
    /// Rounds per measurement: `joiners × rounds` acquires measured each time.
    pub rounds: u64,
    pub lease_ms: u64,
    pub shapes: Vec<WaitShape>,
}

impl WaitCost {
    pub fn shape(&self, shape: Shape) -> Option<&WaitShape> {
        self.shapes.iter().find(|s| s.shape == shape)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcquireAllResult {
    /// The four-key cycle, pipelined and unpipelined; `LOCK.ACQUIREALL`'s series first.
    pub cycles: Vec<GroupResult>,
    pub contention_plan: ContentionPlan,
    pub contention: Vec<MultiKeyContention>,
    pub waits: WaitCost,
}

impl AcquireAllResult {
    /// `LOCK.ACQUIREALL` cycles/s ÷ pipelined `LOCK.ACQUIRE` cycles/s, per repetition.
    pub fn cycle_ratio(&self, pipelined: bool) -> Option<Vec<f64>> {
        let group = self.cycles.iter().find(|g| (g.depth > 1) == pipelined)?;
        let ours = group.series.iter().find(|s| s.label == ACQUIREALL_CYCLE)?;
        let theirs = group.series.iter().find(|s| s.label == PIPELINED_CYCLE)?;
        Some(paired(&ours.samples, &theirs.samples))
    }

    pub fn contention(&self, clients: usize, mechanism: Mechanism) -> Option<&MultiKeyContention> {
        self.contention
            .iter()
            .find(|c| c.clients == clients && c.mechanism == mechanism)
    }

    /// Per-repetition `f(ACQUIREALL) / f(multi-lock)` with `clients` clients.
    pub fn contention_ratio(&self, clients: usize, f: impl Fn(&Sample) -> f64) -> Option<Vec<f64>> {
        let ours = self.contention(clients, Mechanism::AcquireAll)?;
        let theirs = self.contention(clients, Mechanism::MultiLock)?;
        let ours: Vec<f64> = ours.samples.iter().map(&f).collect();
        let theirs: Vec<f64> = theirs.samples.iter().map(&f).collect();
        Some(paired(&ours, &theirs))
    }

    /// The client counts of the contention part, fewest first.
    pub fn client_counts(&self) -> Vec<usize> {
        let mut counts: Vec<usize> = self.contention.iter().map(|c| c.clients).collect();
        counts.sort_unstable();
        counts.dedup();
        counts
    }
}
