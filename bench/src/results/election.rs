//! Scenario 9's results: leader election with a public value (`LOCK.OBSERVE`,
//! `LOCK.PROCLAIM`, `LOCK.ACQUIRE … VALUE`, issue 24). Three parts, each with one
//! sample per repetition, the variants of a part measured back to back:
//!
//! - how long `n` observers take to hear of a change of leader (a grant on a free key)
//!   or of the leader's value (a proclaim): `LOCK.OBSERVE … BLOCK` against the
//!   hand-rolled way, a `PUBLISH` after the write, the observers `SUBSCRIBE`d and then
//!   `GET`ting the key; p50, p99 and max over every observer's answer, and the median
//!   time until the last of the `n` had heard;
//! - throughput: `LOCK.PROCLAIM` against the owner-checked `SET … XX KEEPTTL` script,
//!   `LOCK.ACQUIRE … VALUE` against `LOCK.ACQUIRE` and `SET NX PX` (`GroupResult`s, as
//!   scenario 1's);
//! - bytes per blocked observer, per subscribed client and per idle connection.
//!
//! The ratios are derived here, repetition by repetition, so that the tables take them
//! the same way.

use serde::{Deserialize, Serialize};

use super::paired;
use crate::results::throughput::GroupResult;
use crate::stats::summarised;

/// Labels of the throughput rows.
pub const ACQUIRE_VALUE: &str = "LOCK.ACQUIRE … VALUE";
pub const ACQUIRE: &str = "LOCK.ACQUIRE";
pub const SET_NX_PX: &str = "SET key value NX PX";
pub const PROCLAIM: &str = "LOCK.PROCLAIM";
pub const LUA_PROCLAIM: &str = "Lua: GET = old → SET XX KEEPTTL";

/// What changes, that the observers must hear of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// A leader takes the free key: `LOCK.ACQUIRE key ttl TOKEN t VALUE v`, or
    /// `SET key v NX PX ttl` + `PUBLISH`.
    Grant,
    /// The leader changes its value: `LOCK.PROCLAIM key t v`, or the owner-checked
    /// `SET key v XX KEEPTTL` script + `PUBLISH`.
    Proclaim,
}

impl Change {
    pub const ALL: [Change; 2] = [Change::Grant, Change::Proclaim];

    pub fn label(self) -> &'static str {
        match self {
            Change::Grant => "grant (new leader)",
            Change::Proclaim => "proclaim (new value)",
        }
    }
}

/// How an observer learns of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Watch {
    /// `LOCK.OBSERVE key fence value BLOCK 0`, answered with the new `[fence, value]`.
    Observe,
    /// `SUBSCRIBE` on one connection; on the message, `GET key` on another.
    PubSub,
}

impl Watch {
    pub const ALL: [Watch; 2] = [Watch::Observe, Watch::PubSub];

    pub fn label(self) -> &'static str {
        match self {
            Watch::Observe => "LOCK.OBSERVE … BLOCK",
            Watch::PubSub => "PUBLISH → SUBSCRIBE + GET",
        }
    }
}

/// One (change, watch, observer count): the spread of every observer's wait, from
/// the change sent to the observer holding the new state, one figure per repetition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Notify {
    pub change: Change,
    pub watch: Watch,
    pub observers: u64,
    #[serde(with = "summarised")]
    pub p50_ms: Vec<f64>,
    #[serde(with = "summarised")]
    pub p99_ms: Vec<f64>,
    #[serde(with = "summarised")]
    pub max_ms: Vec<f64>,
    /// Median over the rounds of the wait until the last observer had heard.
    #[serde(with = "summarised")]
    pub all_heard_ms: Vec<f64>,
}

/// Bytes per blocked observer and per subscribed client, both with their connection,
/// and per idle connection (one that sent a `PING`), at one count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObserverMemory {
    pub observers: u64,
    #[serde(with = "summarised")]
    pub idle_connection: Vec<f64>,
    #[serde(with = "summarised")]
    pub observer: Vec<f64>,
    #[serde(with = "summarised")]
    pub subscriber: Vec<f64>,
}

impl ObserverMemory {
    /// What a blocked observer adds to its connection, per repetition.
    pub fn observer_above_idle(&self) -> Vec<f64> {
        difference(&self.observer, &self.idle_connection)
    }

    /// What a subscription adds to its connection, per repetition.
    pub fn subscriber_above_idle(&self) -> Vec<f64> {
        difference(&self.subscriber, &self.idle_connection)
    }
}

fn difference(minuend: &[f64], subtrahend: &[f64]) -> Vec<f64> {
    minuend.iter().zip(subtrahend).map(|(a, b)| a - b).collect()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ElectionResult {
    /// `LOCK.ACQUIRE … VALUE` and `LOCK.PROCLAIM` against their baselines, pipelined and
    /// unpipelined; fencelock's series first.
    pub throughput: Vec<GroupResult>,
    /// Changes per measurement of the notification part.
    pub rounds: u64,
    /// The bytes of a value (`leader_value`'s shortest).
    pub value_bytes: usize,
    pub notify: Vec<Notify>,
    /// Seconds the memory readings wait for the clients' buffers to shrink.
    pub memory_settle_s: u64,
    /// The longest a memory turn waited for the server to be back at its baseline
    /// (a blocked client's memory is freed slowly once it has gone), s.
    #[serde(default, with = "crate::stats::nullable")]
    pub memory_drain_s: f64,
    pub memory: Vec<ObserverMemory>,
    /// Why fewer observers were measured than planned, if they were (open files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped: Option<String>,
}

impl ElectionResult {
    pub fn notify(&self, change: Change, watch: Watch, observers: u64) -> Option<&Notify> {
        self.notify
            .iter()
            .find(|n| n.change == change && n.watch == watch && n.observers == observers)
    }

    /// Per-repetition `f(pub/sub) / f(LOCK.OBSERVE)`: how many times longer the
    /// hand-rolled way takes.
    pub fn notify_ratio(
        &self,
        change: Change,
        observers: u64,
        f: impl Fn(&Notify) -> &Vec<f64>,
    ) -> Option<Vec<f64>> {
        let ours = self.notify(change, Watch::Observe, observers)?;
        let theirs = self.notify(change, Watch::PubSub, observers)?;
        Some(paired(f(theirs), f(ours)))
    }

    /// The observer counts of the notification part, fewest first.
    pub fn observer_counts(&self) -> Vec<u64> {
        let mut counts: Vec<u64> = self.notify.iter().map(|n| n.observers).collect();
        counts.sort_unstable();
        counts.dedup();
        counts
    }
}
