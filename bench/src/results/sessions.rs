//! Scenario 7's results: sessions. What one `LOCK.KEEPALIVE` of a session costs the
//! server next to refreshing the same holdings one pipelined `LOCK.REFRESH` each, at
//! each session size (server CPU of the event loop, and the commands' own time as
//! `INFO commandstats` counts it), one sample per repetition; and bytes per held lock
//! without a session, with one session for all of them and with a session each, held
//! and left once released.
//!
//! The ratios and per-holding figures are derived here, repetition by repetition, so
//! that the targets and the tables take them the same way.

use serde::{Deserialize, Serialize};

use crate::stats::summarised;

/// One session size: `holdings` locks of one session, kept alive by `calls`
/// `LOCK.KEEPALIVE`s in each measurement and refreshed by as many rounds of `holdings`
/// pipelined `LOCK.REFRESH`es in another.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeepalivePoint {
    pub holdings: u64,
    /// `LOCK.KEEPALIVE` calls (and rounds of refreshes) in one measurement.
    pub calls: u64,
    /// Server event-loop CPU per `LOCK.KEEPALIVE`, µs.
    #[serde(rename = "keepalive_server_cpu_us", with = "summarised")]
    pub keepalive_us: Vec<f64>,
    /// Server event-loop CPU per round of `holdings` pipelined `LOCK.REFRESH`es, µs.
    #[serde(rename = "refreshes_server_cpu_us", with = "summarised")]
    pub refreshes_us: Vec<f64>,
    /// `INFO commandstats` time of one `LOCK.KEEPALIVE` (inside the command only: no
    /// reading, parsing or reply writing), µs.
    #[serde(rename = "keepalive_command_us", with = "summarised")]
    pub keepalive_command_us: Vec<f64>,
    /// `INFO commandstats` time of one round of `holdings` `LOCK.REFRESH`es, µs.
    #[serde(rename = "refreshes_command_us", with = "summarised")]
    pub refreshes_command_us: Vec<f64>,
}

fn paired(numerator: &[f64], denominator: &[f64]) -> Vec<f64> {
    numerator
        .iter()
        .zip(denominator)
        .map(|(n, d)| n / d)
        .collect()
}

impl KeepalivePoint {
    /// Server CPU of one `LOCK.KEEPALIVE` ÷ that of `holdings` pipelined refreshes,
    /// per repetition.
    pub fn ratio(&self) -> Vec<f64> {
        paired(&self.keepalive_us, &self.refreshes_us)
    }

    /// The same in the commands' own time (`INFO commandstats`).
    pub fn command_ratio(&self) -> Vec<f64> {
        paired(&self.keepalive_command_us, &self.refreshes_command_us)
    }

    /// Server CPU of `LOCK.KEEPALIVE` per holding it keeps, µs, per repetition.
    pub fn keepalive_per_holding(&self) -> Vec<f64> {
        let n = self.holdings.max(1) as f64;
        self.keepalive_us.iter().map(|us| us / n).collect()
    }

    /// Server CPU per pipelined `LOCK.REFRESH`, µs, per repetition.
    pub fn refresh_per_holding(&self) -> Vec<f64> {
        let n = self.holdings.max(1) as f64;
        self.refreshes_us.iter().map(|us| us / n).collect()
    }
}

/// Bytes per held lock (`used_memory` delta over `holdings` locks, server-generated
/// tokens, 32-hex-character session names) and bytes left per lock once all are
/// released, one figure per repetition each.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionMemory {
    pub holdings: u64,
    /// `LOCK.ACQUIRE key ttl`: no session.
    #[serde(with = "summarised")]
    pub plain_held: Vec<f64>,
    /// `LOCK.ACQUIRE key ttl SESSION s`, one session for all the locks.
    #[serde(with = "summarised")]
    pub one_session_held: Vec<f64>,
    /// `LOCK.ACQUIRE key ttl SESSION s_i`, a session of its own for each lock.
    #[serde(with = "summarised")]
    pub own_sessions_held: Vec<f64>,
    #[serde(with = "summarised")]
    pub plain_left: Vec<f64>,
    #[serde(with = "summarised")]
    pub one_session_left: Vec<f64>,
    #[serde(with = "summarised")]
    pub own_sessions_left: Vec<f64>,
}

impl SessionMemory {
    /// Bytes a lock in one shared session costs above a lock without one, per
    /// repetition (measured back to back).
    pub fn one_session_extra(&self) -> Vec<f64> {
        difference(&self.one_session_held, &self.plain_held)
    }

    /// Bytes a lock with a session of its own costs above a lock without one.
    pub fn own_sessions_extra(&self) -> Vec<f64> {
        difference(&self.own_sessions_held, &self.plain_held)
    }
}

fn difference(minuend: &[f64], subtrahend: &[f64]) -> Vec<f64> {
    minuend.iter().zip(subtrahend).map(|(a, b)| a - b).collect()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionsResult {
    /// The lease every holding is acquired with, and the one each keepalive and refresh
    /// sets again.
    pub lease_ms: u64,
    /// Holdings kept alive (or refreshed) in one measurement, at least: `calls` ×
    /// `holdings` of each point.
    pub renewals: u64,
    /// `LOCK.KEEPALIVE`s in flight on the measuring connection; a round of refreshes is
    /// sent whole, in one write.
    pub depth: usize,
    /// Smallest session first.
    pub points: Vec<KeepalivePoint>,
    pub memory: SessionMemory,
    /// Share of a CPU the idle server took before each size's runs, taken off every
    /// figure of that size pro rata of the run's wall time.
    #[serde(with = "crate::stats::nullable_each")]
    pub idle_cpu_share: Vec<f64>,
}

impl SessionsResult {
    pub fn point(&self, holdings: u64) -> Option<&KeepalivePoint> {
        self.points.iter().find(|p| p.holdings == holdings)
    }
}
