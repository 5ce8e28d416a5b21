//! Scenario 6's results: cost curves. What one command costs the server (CPU time of
//! its event loop per operation) as one thing grows — the holders of one semaphore, the
//! waiters queued on one key, the locks held on distinct keys — at each size one sample
//! per repetition; what each family's state takes in memory per item at its largest
//! size; and the idle CPU taken off each figure.
//!
//! The operations are named here (`Op`), not in `measure`, so that the targets and the
//! chart know every curve a run should have, measured or not.

use serde::{Deserialize, Serialize};

use crate::stats::{nullable, summarised};

/// What grows along a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Holders of one semaphore (`LIMIT` large enough for all of them).
    Holders,
    /// Clients queued (`BLOCK`) on one key held by another.
    Waiters,
    /// Locks held at once, one key each.
    Locks,
}

impl Family {
    pub const ALL: [Family; 3] = [Family::Holders, Family::Waiters, Family::Locks];

    pub fn title(self) -> &'static str {
        match self {
            Family::Holders => "holders of one semaphore",
            Family::Waiters => "waiters on one key",
            Family::Locks => "held locks (one key each)",
        }
    }

    /// What one unit of the size is called, singular and plural.
    pub fn unit(self, n: u64) -> &'static str {
        match (self, n) {
            (Family::Holders, 1) => "holder",
            (Family::Holders, _) => "holders",
            (Family::Waiters, 1) => "waiter",
            (Family::Waiters, _) => "waiters",
            (Family::Locks, 1) => "lock",
            (Family::Locks, _) => "locks",
        }
    }
}

/// One measured operation: one command, or a cycle of two that leaves the state as it
/// found it (so that the size stays what it says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// `LOCK.ACQUIRE key ttl LIMIT n TOKEN fresh` + `LOCK.RELEASE key fresh`.
    NewPermit,
    /// `LOCK.REFRESH key token ttl` of one holder (a different one each time).
    RefreshHolder,
    /// `LOCK.RELEASE key token` + `LOCK.ACQUIRE … LIMIT n TOKEN token` of one holder.
    ReacquireHolder,
    /// `LOCK.INFO key` of the semaphore.
    InfoSemaphore,
    /// `LOCK.ACQUIRE key ttl` without `BLOCK` on the held, queued key: nil.
    BusyAcquire,
    /// `LOCK.INFO key` of the queued key.
    InfoQueue,
    /// `LOCK.ACQUIRE key ttl BLOCK 0` from a new waiter, which then leaves by
    /// `CLIENT UNBLOCK` (the server's timeout path, without waiting for its timer).
    JoinLeave,
    /// The holder's `LOCK.RELEASE` hands the lock to the head of the queue, and the
    /// releaser queues again (`LOCK.ACQUIRE … BLOCK 0`): the queue stays at its size.
    Handoff,
    /// `LOCK.ACQUIRE` on a key never used + `LOCK.RELEASE` of it.
    FreshCycle,
    /// `LOCK.RELEASE` of a held key + `LOCK.ACQUIRE … TOKEN` of it again.
    ReacquireLock,
    /// `LOCK.REFRESH` of a held key.
    RefreshLock,
    /// `LOCK.INFO` of a held key.
    InfoLock,
    /// `PTTL` of a held key: the keyspace's own lookup at that size, for reference.
    PttlLock,
}

impl Op {
    pub const ALL: [Op; 13] = [
        Op::NewPermit,
        Op::RefreshHolder,
        Op::ReacquireHolder,
        Op::InfoSemaphore,
        Op::BusyAcquire,
        Op::InfoQueue,
        Op::JoinLeave,
        Op::Handoff,
        Op::FreshCycle,
        Op::ReacquireLock,
        Op::RefreshLock,
        Op::InfoLock,
        Op::PttlLock,
    ];

    pub fn family(self) -> Family {
        match self {
            Op::NewPermit | Op::RefreshHolder | Op::ReacquireHolder | Op::InfoSemaphore => {
                Family::Holders
            }
            Op::BusyAcquire | Op::InfoQueue | Op::JoinLeave | Op::Handoff => Family::Waiters,
            Op::FreshCycle | Op::ReacquireLock | Op::RefreshLock | Op::InfoLock | Op::PttlLock => {
                Family::Locks
            }
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Op::NewPermit => "new permit: LOCK.ACQUIRE LIMIT + LOCK.RELEASE",
            Op::RefreshHolder => "LOCK.REFRESH of one holder",
            Op::ReacquireHolder => "one holder: LOCK.RELEASE + LOCK.ACQUIRE again",
            Op::InfoSemaphore => "LOCK.INFO",
            Op::BusyAcquire => "LOCK.ACQUIRE, busy (nil, no BLOCK)",
            Op::InfoQueue => "LOCK.INFO",
            Op::JoinLeave => "a waiter joins (BLOCK) and leaves (CLIENT UNBLOCK)",
            Op::Handoff => "handoff: LOCK.RELEASE grants the head; releaser queues again",
            Op::FreshCycle => "fresh key: LOCK.ACQUIRE + LOCK.RELEASE",
            Op::ReacquireLock => "held key: LOCK.RELEASE + LOCK.ACQUIRE again",
            Op::RefreshLock => "LOCK.REFRESH of a held key",
            Op::InfoLock => "LOCK.INFO of a held key",
            Op::PttlLock => "PTTL of a held key (Redis's own lookup, reference)",
        }
    }

    /// Commands one operation sends (a cycle is two).
    pub fn commands(self) -> u32 {
        match self {
            Op::NewPermit
            | Op::ReacquireHolder
            | Op::JoinLeave
            | Op::Handoff
            | Op::FreshCycle
            | Op::ReacquireLock => 2,
            _ => 1,
        }
    }

    /// A reference curve, of a command that is not fencelock's: no target.
    pub fn is_reference(self) -> bool {
        self == Op::PttlLock
    }
}

/// Server CPU per operation at one size, in µs, one sample per repetition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub size: u64,
    #[serde(rename = "server_cpu_us", with = "summarised")]
    pub samples: Vec<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Curve {
    pub op: Op,
    /// `op`'s label, for whoever reads report.json.
    pub command: String,
    pub commands_per_op: u32,
    /// Smallest size first.
    pub points: Vec<Point>,
}

impl Curve {
    /// Cost at the largest size ÷ cost at the smallest, per repetition (the k-th
    /// repetition of one over the k-th of the other); `None` with fewer than two sizes.
    pub fn growth(&self) -> Option<Vec<f64>> {
        let (first, last) = (self.points.first()?, self.points.last()?);
        (self.points.len() >= 2).then(|| {
            last.samples
                .iter()
                .zip(&first.samples)
                .map(|(large, small)| large / small)
                .collect()
        })
    }
}

/// The sizes of one family, and what the server did when idle at each.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sizes {
    pub family: Family,
    /// The sizes the run asked for.
    pub planned: Vec<u64>,
    /// The sizes measured: the planned ones, unless the machine could not hold the
    /// largest (`capped` says why).
    pub measured: Vec<u64>,
    pub capped: Option<String>,
    /// Share of a CPU the idle server's event loop took at each measured size (its
    /// timers, which at many clients visit them all): taken off every figure, pro rata
    /// of the measurement's wall time.
    #[serde(with = "crate::stats::nullable_each")]
    pub idle_cpu_share: Vec<f64>,
    /// The same once the operations at that size have run: well above the share
    /// before, an operation left the server busy.
    #[serde(with = "crate::stats::nullable_each")]
    pub idle_after_cpu_share: Vec<f64>,
}

/// Bytes per item of one family at its largest size: `used_memory` once stable, the
/// state against the server without it, divided by the size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Memory {
    pub what: String,
    pub family: Family,
    pub size: u64,
    #[serde(with = "nullable")]
    pub bytes: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CurvesResult {
    pub sizes: Vec<Sizes>,
    /// Operations per measurement of a pipelined curve, of a handoff curve and of the
    /// join-and-leave curve.
    pub ops: u64,
    pub handoffs: u64,
    pub joins: u64,
    /// Commands in flight on the measuring connection.
    pub depth: usize,
    /// The lease every holder of the curves has.
    pub lease_ms: u64,
    pub curves: Vec<Curve>,
    pub memory: Vec<Memory>,
    /// The idle server around handoffs under a lease longer than 2^31 µs.
    #[serde(default)]
    pub long_timer: Option<LongTimerCheck>,
}

/// A few handoffs among `waiters` clients queued under a lease of `lease_ms` (the
/// module times the next handoff for the lease's end): the share of a CPU the idle
/// server takes before and after. The same before and after, the handoffs left
/// nothing running; well above, the event loop no longer sleeps (on Redis 7.0, a
/// module timer more than 2^31 µs away overflows the loop's `int` arithmetic).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LongTimerCheck {
    pub waiters: u64,
    pub handoffs: u64,
    pub lease_ms: u64,
    #[serde(with = "nullable")]
    pub idle_before: f64,
    #[serde(with = "nullable")]
    pub idle_after: f64,
}

impl CurvesResult {
    pub fn curve(&self, op: Op) -> Option<&Curve> {
        self.curves.iter().find(|c| c.op == op)
    }

    pub fn sizes(&self, family: Family) -> Option<&Sizes> {
        self.sizes.iter().find(|s| s.family == family)
    }
}
