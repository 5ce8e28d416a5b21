//! Checks over a recorded history. Each returns the anomalies it found, as sentences
//! naming the operations involved; an empty list means the property held. How long a
//! holding certainly lasted, and why the bounds cannot invent an anomaly: `holding`.

use std::collections::{BTreeMap, HashMap};

use super::history::{Mode, Op, Outcome, Request};
use super::holding::Holding;
use super::workload::Finished;

/// Slack for millisecond rounding between the two sides' clocks readings.
const SLACK_US: i64 = 2_000;

fn by_key(ops: &[Op]) -> HashMap<&str, Vec<&Op>> {
    let mut keys: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in ops {
        keys.entry(op.key.as_str()).or_default().push(op);
    }
    keys
}

fn describe(op: &Op) -> String {
    format!(
        "client {} {:?} on {} at {}..{} us -> {:?} (node {})",
        op.client, op.request, op.key, op.invoked_us, op.completed_us, op.outcome, op.node
    )
}

/// Replies that are neither a proper lock answer nor an error.
pub fn malformed_replies(ops: &[Op]) -> Vec<String> {
    ops.iter()
        .filter(|op| matches!(&op.outcome, Outcome::Failed(text) if text.starts_with("unexpected")))
        .map(|op| format!("malformed reply: {}", describe(op)))
        .collect()
}

/// Error replies that blame the request itself. The loads ask only well-formed acquires,
/// and every holder of a key asks the same way (readers and writers of a read-write lock
/// differ only by `SHARED`, which makes them wait, not fail): a `WRONGMODE`, a syntax
/// error or a refused limit is a defect.
pub fn refused_requests(ops: &[Op]) -> Vec<String> {
    const BLAMING: [&str; 4] = [
        "WRONGMODE",
        "syntax error",
        "invalid limit",
        "not an integer",
    ];
    ops.iter()
        .filter(|op| {
            matches!(&op.outcome, Outcome::Failed(text)
                if BLAMING.iter().any(|blame| text.contains(blame)))
        })
        .map(|op| format!("request refused: {}", describe(op)))
        .collect()
}

/// Fences of one key increase in real-time order: a grant that completed before another
/// was invoked has the smaller fence; no two grants share a fence.
pub fn fences_increase(ops: &[Op]) -> Vec<String> {
    let mut anomalies = Vec::new();
    for (key, ops) in by_key(ops) {
        let mut grants: Vec<&Op> = ops.into_iter().filter(|op| op.fence().is_some()).collect();
        let mut seen: HashMap<i64, &Op> = HashMap::new();
        for grant in &grants {
            if let Some(first) = seen.insert(grant.fence().unwrap_or(0), grant) {
                anomalies.push(format!(
                    "{key}: fence issued twice: {} and {}",
                    describe(first),
                    describe(grant)
                ));
            }
        }
        let mut by_completion = grants.clone();
        by_completion.sort_by_key(|op| op.completed_us);
        grants.sort_by_key(|op| op.invoked_us);
        let mut done = 0;
        let mut highest: Option<&Op> = None;
        for grant in grants {
            while done < by_completion.len() && by_completion[done].completed_us < grant.invoked_us
            {
                let candidate = by_completion[done];
                if highest.is_none_or(|h| candidate.fence() > h.fence()) {
                    highest = Some(candidate);
                }
                done += 1;
            }
            if let Some(earlier) = highest.filter(|h| h.fence() >= grant.fence()) {
                anomalies.push(format!(
                    "{key}: fence did not increase: {} then {}",
                    describe(earlier),
                    describe(grant)
                ));
            }
        }
    }
    anomalies
}

fn mode_of(grant: &Op) -> Mode {
    grant.mode().unwrap_or(Mode::Exclusive)
}

/// Holders of each key that were certainly live at the same time, judged against what
/// their modes admit; and the most that were seen together, per mode.
pub struct Holds {
    pub anomalies: Vec<String>,
    /// For each mode, the most holders in it certainly live together on one key.
    pub peaks: BTreeMap<Mode, usize>,
}

/// Sweeps the certainly-held intervals of each key in order of their start: when a
/// holding starts, the holdings still live with it (ending more than the slack after)
/// may not outnumber what the most demanding of them admits: an exclusive holder nobody
/// else, a semaphore holder `n` in all, a shared holder any number.
pub fn holds(ops: &[Op]) -> Holds {
    let mut holds = Holds {
        anomalies: Vec::new(),
        peaks: BTreeMap::new(),
    };
    for (key, ops) in by_key(ops) {
        let mut held: Vec<(i64, i64, &Op)> = ops
            .iter()
            .filter(|op| op.fence().is_some() && op.acked_yes())
            .map(|grant| {
                let (start, end) = Holding::new(grant, &ops).certainly_held();
                (start, end, *grant)
            })
            .filter(|(start, end, _)| start < end)
            .collect();
        held.sort_by_key(|(start, _, _)| *start);
        let mut live: Vec<(i64, &Op)> = Vec::new();
        for (start, end, grant) in held {
            live.retain(|(until, _)| until - SLACK_US > start);
            live.push((end, grant));
            let mode = mode_of(grant);
            let same_mode = live.iter().filter(|(_, g)| mode_of(g) == mode).count();
            let peak = holds.peaks.entry(mode).or_default();
            *peak = (*peak).max(same_mode);
            let admitted = live
                .iter()
                .map(|(_, g)| mode_of(g).admits())
                .min()
                .unwrap_or(usize::MAX);
            if live.len() > admitted {
                let others: Vec<String> = live
                    .iter()
                    .filter(|(_, other)| !std::ptr::eq(*other, grant))
                    .map(|(until, other)| format!("{} held until {until} us", describe(other)))
                    .collect();
                holds.anomalies.push(format!(
                    "{key}: {} holders at once where {admitted} may hold: {} held from {start} us while {}",
                    live.len(),
                    describe(grant),
                    others.join("; ")
                ));
            }
        }
    }
    holds
}

/// No key ever had more certainly-live holders than their modes admit: no exclusive
/// holder overlapping any other holder, no more than `n` holders of a semaphore.
pub fn holder_limits(ops: &[Op]) -> Vec<String> {
    holds(ops).anomalies
}

/// Overlaps that `holder_limits` reports, counted (for scenarios where acknowledged
/// writes may be lost by design and overlaps are a measured figure, not a failure).
pub fn overlap_count(ops: &[Op]) -> usize {
    holder_limits(ops).len()
}

/// No refresh or release succeeds once the lease it names has certainly ended.
pub fn no_revival(ops: &[Op]) -> Vec<String> {
    let mut anomalies = Vec::new();
    for (key, ops) in by_key(ops) {
        for grant in ops.iter().filter(|op| op.fence().is_some()) {
            let ttl = grant.ttl_ms().unwrap_or(0);
            let mut ends_by_ms = Some(grant.completed_us / 1_000 + ttl);
            for op in Holding::new(grant, &ops).follow_ups {
                let succeeded = matches!(op.outcome, Outcome::Done(true));
                if let (true, Some(end)) = (succeeded, ends_by_ms) {
                    if op.invoked_us > (end + 1) * 1_000 {
                        anomalies.push(format!(
                            "{key}: succeeded after the lease ended at {end} ms: {} (grant {})",
                            describe(op),
                            describe(grant)
                        ));
                    }
                }
                if let Request::Refresh { ttl_ms, .. } = op.request {
                    ends_by_ms = match op.outcome {
                        Outcome::Done(true) => {
                            ends_by_ms.map(|e| e.max(op.completed_us / 1_000 + ttl_ms))
                        }
                        // It may take effect at any time: no upper bound any more.
                        Outcome::Unknown(_) => None,
                        _ => ends_by_ms,
                    };
                }
            }
        }
    }
    anomalies
}

/// Every fence a later server generation issued exceeds every fence an earlier one did.
pub fn later_nodes_fence_higher(ops: &[Op]) -> Vec<String> {
    let mut highest_by_node: HashMap<usize, &Op> = HashMap::new();
    let mut lowest_by_node: HashMap<usize, &Op> = HashMap::new();
    for op in ops.iter().filter(|op| op.fence().is_some()) {
        let high = highest_by_node.entry(op.node).or_insert(op);
        if op.fence() > high.fence() {
            *high = op;
        }
        let low = lowest_by_node.entry(op.node).or_insert(op);
        if op.fence() < low.fence() {
            *low = op;
        }
    }
    let mut anomalies = Vec::new();
    for (node, lowest) in &lowest_by_node {
        for (earlier, highest) in highest_by_node.iter().filter(|(n, _)| *n < node) {
            if lowest.fence() <= highest.fence() {
                anomalies.push(format!(
                    "node {node} issued {} not above node {earlier}'s {}",
                    describe(lowest),
                    describe(highest)
                ));
            }
        }
    }
    anomalies
}

/// Counts for the report.
pub struct Tally {
    pub ops: usize,
    pub grants: usize,
    pub unknown: usize,
    pub grants_by_mode: BTreeMap<Mode, usize>,
    /// The most certainly-live holders of one key at once, per mode.
    pub peaks: BTreeMap<Mode, usize>,
}

pub fn tally(ops: &[Op]) -> Tally {
    let mut grants_by_mode: BTreeMap<Mode, usize> = BTreeMap::new();
    for grant in ops.iter().filter(|op| op.fence().is_some()) {
        *grants_by_mode.entry(mode_of(grant)).or_default() += 1;
    }
    Tally {
        ops: ops.len(),
        grants: grants_by_mode.values().sum(),
        unknown: ops.iter().filter(|op| op.maybe()).count(),
        grants_by_mode,
        peaks: holds(ops).peaks,
    }
}

impl Tally {
    /// Grants per mode and the most holders certainly live together, for the notes.
    pub fn modes(&self) -> String {
        let list = |counts: &BTreeMap<Mode, usize>| {
            counts
                .iter()
                .map(|(mode, n)| format!("{mode} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "grants by mode: {}; most holders certainly live at once: {}",
            list(&self.grants_by_mode),
            list(&self.peaks)
        )
    }

    /// Why the holder limits were not put to the test, if they were not: a semaphore
    /// that never had as many certainly-live holders as it admits, shared holders that
    /// never held together, an exclusive mode that was never granted.
    pub fn limits_untested(&self) -> Vec<String> {
        self.grants_by_mode
            .keys()
            .filter_map(|&mode| {
                let wanted = match mode {
                    Mode::Limit(n) => usize::try_from(n).unwrap_or(0),
                    Mode::Shared => 2,
                    Mode::Exclusive => 1,
                };
                let peak = self.peaks.get(&mode).copied().unwrap_or(0);
                (peak < wanted).then(|| {
                    format!("{mode}: at most {peak} holders certainly live at once, never {wanted}")
                })
            })
            .collect()
    }

    /// Fails the test if `limits_untested` names a mode (after the summary is emitted).
    pub fn assert_limits_tested(&self) {
        let untested = self.limits_untested();
        assert!(
            untested.is_empty(),
            "the load never reached the holder limits it checks: {untested:?}"
        );
    }
}

/// The checks every scenario must pass whatever its fault: well-formed replies, no
/// request refused as wrong, fences increasing in real-time order, no lease revived
/// after it ended.
pub fn always_required(ops: &[Op]) -> Vec<String> {
    let mut anomalies = malformed_replies(ops);
    anomalies.extend(refused_requests(ops));
    anomalies.extend(fences_increase(ops));
    anomalies.extend(no_revival(ops));
    anomalies
}

/// Writes the fenced resource accepted although they overwrote an update they never
/// read: there must be none, whatever the fault.
pub fn stale_writes(finished: &Finished) -> Option<String> {
    (finished.fenced.stale > 0).then(|| {
        format!(
            "{} stale writes accepted by the fenced resource",
            finished.fenced.stale
        )
    })
}

/// What a load run whose acknowledged grants all survive must show: the checks above,
/// no more holders at once than their modes admit, and no stale write accepted by the
/// fenced resource.
pub fn fenced_run(finished: &Finished) -> Vec<String> {
    let mut anomalies = always_required(&finished.ops);
    anomalies.extend(holder_limits(&finished.ops));
    anomalies.extend(stale_writes(finished));
    anomalies
}
