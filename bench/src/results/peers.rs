//! The etcd side by side's results (`make bench-peers`; not one of the numbered
//! scenarios): fencelock and etcd's lock API side by side, in one run, on the same machine and pinning. Each row has one series per
//! system — fencelock as the other scenarios run it (persistence off), fencelock on a
//! server that fsyncs every write (`appendonly yes`, `appendfsync always`, as etcd
//! fsyncs every commit), and etcd — with one sample per repetition, the systems
//! alternating within each repetition. Always compiled (only the measuring needs the
//! `peers` feature), so that a report with these results reads back anywhere.

use serde::{Deserialize, Serialize};

use crate::results::contention::Sample;
use crate::stats::nullable;

/// Who answers the lock commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// fencelock on a server with persistence off (the other scenarios' server).
    Fencelock,
    /// fencelock on a server with `appendonly yes` and `appendfsync always`.
    FencelockAof,
    /// etcd's lock service (`v3lockpb.Lock`/`Unlock`) with a lease per client.
    Etcd,
}

impl System {
    pub fn label(self) -> &'static str {
        match self {
            System::Fencelock => "fencelock",
            System::FencelockAof => "fencelock (AOF always)",
            System::Etcd => "etcd",
        }
    }
}

/// Every system, in the order the tables show them.
pub const SYSTEMS: [System; 3] = [System::Fencelock, System::FencelockAof, System::Etcd];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeersResult {
    /// The etcd under test as it reports itself, e.g. `etcd 3.4.23`.
    pub etcd: String,
    /// The file system the servers' data directories (AOF, etcd's WAL) are on.
    pub filesystem: String,
    /// Where etcd and the second fencelock server ran (beside the run's `placement`).
    pub placement: String,
    /// Length of one timed cycle run.
    pub cycle_ms: u64,
    /// Length of one contention run.
    pub contention_ms: u64,
    /// The holder's lease in the takeover row.
    pub takeover_lease_ms: u64,
    /// The machine's 1-minute load average when the scenario started and ended: the
    /// servers' CPU is pinned, not reserved, and other processes may run on it.
    #[serde(with = "nullable")]
    pub load_before: f64,
    #[serde(with = "nullable")]
    pub load_after: f64,
    pub cycles: Vec<CycleRow>,
    pub contention: Vec<ContentionRow>,
    pub takeover: Vec<TakeoverSeries>,
}

/// Lock cycles (acquire with a lease, release) on distinct keys: `clients` clients, each
/// with `depth` cycles in flight.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CycleRow {
    pub clients: usize,
    pub depth: usize,
    pub series: Vec<CycleSeries>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CycleSeries {
    pub system: System,
    pub samples: Vec<CycleSample>,
}

/// One timed cycle run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CycleSample {
    pub cycles: u64,
    #[serde(with = "nullable")]
    pub cycles_per_s: f64,
    /// Cycle latency, acquire sent to release answered.
    #[serde(with = "nullable")]
    pub p50_ms: f64,
    #[serde(with = "nullable")]
    pub p99_ms: f64,
    /// Share of the run's wall time the server (all its threads) was on a CPU.
    #[serde(with = "nullable")]
    pub server_busy: f64,
    /// The same for the load generator (this process, all threads).
    #[serde(with = "nullable")]
    pub client_busy: f64,
}

/// One key, `clients` client processes: think 0–2 ms, ask (waiting server-side), hold
/// 0.5 ms, release.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContentionRow {
    pub clients: usize,
    pub series: Vec<ContentionSeries>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContentionSeries {
    pub system: System,
    /// The contention scenario's samples (the wait histogram is not written).
    pub samples: Vec<Sample>,
}

/// A holder killed (no release, no keepalive) while a waiter is queued.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TakeoverSeries {
    pub system: System,
    pub samples: Vec<TakeoverSample>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TakeoverSample {
    /// From the holder's kill to the waiter's grant.
    #[serde(with = "nullable")]
    pub kill_to_grant_ms: f64,
    /// From the end of the holder's lease (counted from the moment its holder sent the
    /// request that started the lease, so never later than the true end) to the
    /// waiter's grant.
    #[serde(with = "nullable")]
    pub past_lease_end_ms: f64,
}

fn paired(numerator: &[f64], denominator: &[f64]) -> Vec<f64> {
    numerator
        .iter()
        .zip(denominator)
        .map(|(n, d)| n / d)
        .collect()
}

impl PeersResult {
    pub fn cycle(&self, clients: usize, depth: usize, system: System) -> Option<&CycleSeries> {
        self.cycles
            .iter()
            .find(|r| r.clients == clients && r.depth == depth)?
            .series
            .iter()
            .find(|s| s.system == system)
    }

    pub fn contended(&self, clients: usize, system: System) -> Option<&ContentionSeries> {
        self.contention
            .iter()
            .find(|r| r.clients == clients)?
            .series
            .iter()
            .find(|s| s.system == system)
    }

    pub fn takeover(&self, system: System) -> Option<&TakeoverSeries> {
        self.takeover.iter().find(|s| s.system == system)
    }

    /// Per-repetition `f(numerator) / f(denominator)` of one cycle row.
    pub fn cycle_ratio(
        &self,
        clients: usize,
        depth: usize,
        numerator: System,
        denominator: System,
        f: impl Fn(&CycleSample) -> f64,
    ) -> Option<Vec<f64>> {
        let top: Vec<f64> = self
            .cycle(clients, depth, numerator)?
            .samples
            .iter()
            .map(&f)
            .collect();
        let bottom: Vec<f64> = self
            .cycle(clients, depth, denominator)?
            .samples
            .iter()
            .map(&f)
            .collect();
        Some(paired(&top, &bottom))
    }

    /// Per-repetition `f(numerator) / f(denominator)` of one contention row.
    pub fn contention_ratio(
        &self,
        clients: usize,
        numerator: System,
        denominator: System,
        f: impl Fn(&Sample) -> f64,
    ) -> Option<Vec<f64>> {
        let top: Vec<f64> = self
            .contended(clients, numerator)?
            .samples
            .iter()
            .map(&f)
            .collect();
        let bottom: Vec<f64> = self
            .contended(clients, denominator)?
            .samples
            .iter()
            .map(&f)
            .collect();
        Some(paired(&top, &bottom))
    }

    /// Per-repetition `f(numerator) / f(denominator)` of the takeover row.
    pub fn takeover_ratio(
        &self,
        numerator: System,
        denominator: System,
        f: impl Fn(&TakeoverSample) -> f64,
    ) -> Option<Vec<f64>> {
        let top: Vec<f64> = self.takeover(numerator)?.samples.iter().map(&f).collect();
        let bottom: Vec<f64> = self.takeover(denominator)?.samples.iter().map(&f).collect();
        Some(paired(&top, &bottom))
    }
}
