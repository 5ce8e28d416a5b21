//! Everything one run measured, typed: what `measure` produces and `report` reads,
//! the one vocabulary both sides share (neither imports the other), and what
//! report.json holds (`ReportFile`), written with serde and read back by `combine`.
//! The ratios derived from the results are here too: each ratio is taken per
//! repetition (fencelock and its baseline measured back to back), then summarised as
//! median and min–max.
//!
//! One file a scenario under `results/`; this one holds the run as a whole.

pub mod acquireall;
pub mod contention;
pub mod curves;
pub mod election;
pub mod machine;
pub mod memory;
pub mod peers;
pub mod profile;
pub mod sessions;
pub mod throughput;

use serde::{Deserialize, Serialize};

use crate::stats::{nullable, spread, summarised, Spread};
use acquireall::AcquireAllResult;
use contention::{ContentionResult, Lock, Mode, Sample};
use curves::CurvesResult;
use election::ElectionResult;
use machine::{Machine, Natives};
use memory::MemoryResult;
use peers::PeersResult;
use profile::ProfileResult;
use sessions::SessionsResult;
use throughput::GroupResult;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub machine: Machine,
    pub natives: Natives,
    pub workload: Workload,
    pub started_unix: u64,
    #[serde(with = "nullable")]
    pub elapsed_s: f64,
    pub throughput: Vec<GroupResult>,
    pub contention: Vec<ContentionResult>,
    pub memory: MemoryResult,
    pub profile: ProfileResult,
    /// fencelock and etcd side by side (`make bench-peers`); absent from other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<PeersResult>,
    /// `None` when not run, and in a report.json written before the curves existed.
    #[serde(default)]
    pub curves: Option<CurvesResult>,
    /// `LOCK.KEEPALIVE` against pipelined refreshes, and memory per session holding;
    /// `None` when not run, and in a report.json written before sessions existed.
    #[serde(default)]
    pub sessions: Option<SessionsResult>,
    /// Many keys at once: `LOCK.ACQUIREALL` against pipelined acquires and a client-side
    /// multi-lock, and what deadlock detection adds to a wait; `None` when not run, and
    /// in a report.json written before it existed.
    #[serde(default)]
    pub acquireall: Option<AcquireAllResult>,
    /// Leader election with a public value: `LOCK.OBSERVE` against `PUBLISH` and
    /// `SUBSCRIBE`, `LOCK.PROCLAIM` and `LOCK.ACQUIRE … VALUE` throughput, memory per
    /// blocked observer; `None` when not run, and in a report.json written before it
    /// existed.
    #[serde(default)]
    pub election: Option<ElectionResult>,
}

/// How much each scenario did (the part of the command line a report states): the
/// run's size, smoke or full, and every count and length the scenarios used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub smoke: bool,
    pub repetitions: usize,
    pub connections: usize,
    /// Commands in flight per connection in a pipelined run.
    #[serde(rename = "pipeline_depth")]
    pub depth: usize,
    /// Commands each connection sends in one pipelined run (split into operations).
    #[serde(rename = "pipelined_commands_per_connection")]
    pub pipelined_commands: u64,
    /// Commands each connection sends in one unpipelined run.
    #[serde(rename = "unpipelined_commands_per_connection")]
    pub unpipelined_commands: u64,
    /// Length of one contention run.
    pub contention_ms: u64,
    /// Client counts contending for one lock.
    pub contention_clients: Vec<usize>,
    /// Client counts contending for one semaphore of `semaphore_limit` permits.
    pub semaphore_clients: Vec<usize>,
    pub semaphore_limit: u32,
    pub memory_locks: u64,
    /// Commands per connection in each profile run.
    #[serde(rename = "profile_commands_per_connection")]
    pub profile_commands: u64,
}

impl Workload {
    /// What is contended for, with how many clients: the lock with each of
    /// `contention_clients`, then the semaphore with each of `semaphore_clients`.
    pub fn contention_setups(&self) -> Vec<(Lock, usize)> {
        let semaphore = Lock::Semaphore {
            limit: self.semaphore_limit,
        };
        let locks = self.contention_clients.iter().map(|&c| (Lock::Mutex, c));
        let semaphores = self.semaphore_clients.iter().map(|&c| (semaphore, c));
        locks.chain(semaphores).collect()
    }
}

/// fencelock's rate over one baseline's, per repetition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratio {
    pub group: String,
    pub depth: usize,
    pub fencelock: String,
    pub baseline: String,
    #[serde(rename = "ratio", with = "summarised")]
    pub samples: Vec<f64>,
}

impl Ratio {
    pub fn mode(&self) -> &'static str {
        if self.depth > 1 {
            "pipelined"
        } else {
            "unpipelined"
        }
    }

    pub fn spread(&self) -> Spread {
        spread(&self.samples)
    }
}

/// One of the issues' targets as checked against a run (the checks are `report`'s).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    pub wanted: String,
    pub measured: Spread,
    pub unit: String,
    /// Decimals the measured figures are shown with.
    pub decimals: usize,
    /// `None` when the run did not measure it (`--only`).
    pub met: Option<bool>,
}

/// report.json: the results, and the ratios and targets made of them, for tools and
/// for comparing runs (`combine`). The results' fields stand at the top level.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportFile {
    #[serde(flatten)]
    pub results: Results,
    pub ratios: Vec<Ratio>,
    pub targets: Vec<Target>,
}

/// Per-repetition `numerator / denominator` (the scenarios' results use it too).
fn paired(numerator: &[f64], denominator: &[f64]) -> Vec<f64> {
    numerator
        .iter()
        .zip(denominator)
        .map(|(n, d)| n / d)
        .collect()
}

/// Every comparison's ratios: its first series (fencelock's) over each of the others.
/// (Also the comparisons of the scenarios that have their own, such as scenario 9's.)
pub fn group_ratios(groups: &[GroupResult]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    for group in groups {
        let Some((ours, baselines)) = group.series.split_first() else {
            continue;
        };
        for baseline in baselines {
            ratios.push(Ratio {
                group: group.id.clone(),
                depth: group.depth,
                fencelock: ours.label.clone(),
                baseline: baseline.label.clone(),
                samples: paired(&ours.samples, &baseline.samples),
            });
        }
    }
    ratios
}

impl Results {
    pub fn ratios(&self) -> Vec<Ratio> {
        group_ratios(&self.throughput)
    }

    pub fn ratio(&self, group: &str, pipelined: bool, baseline: &str) -> Option<Ratio> {
        self.ratios()
            .into_iter()
            .find(|r| r.group == group && (r.depth > 1) == pipelined && r.baseline == baseline)
    }

    pub fn contention(&self, lock: Lock, clients: usize, mode: Mode) -> Option<&ContentionResult> {
        self.contention
            .iter()
            .find(|c| c.lock == lock && c.clients == clients && c.mode == mode)
    }

    /// Per-repetition `f(numerator) / f(denominator)` for one lock and client count.
    pub fn contention_ratio(
        &self,
        lock: Lock,
        clients: usize,
        numerator: Mode,
        denominator: Mode,
        f: impl Fn(&Sample) -> f64,
    ) -> Option<Vec<f64>> {
        let top = self.contention(lock, clients, numerator)?;
        let bottom = self.contention(lock, clients, denominator)?;
        let top: Vec<f64> = top.samples.iter().map(&f).collect();
        let bottom: Vec<f64> = bottom.samples.iter().map(&f).collect();
        Some(paired(&top, &bottom))
    }
}
