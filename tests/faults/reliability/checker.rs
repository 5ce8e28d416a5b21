//! Checks over a recorded history. Each returns the anomalies it found, as sentences
//! naming the operations involved; an empty list means the property held.
//!
//! Bounds are conservative in the direction that cannot invent an anomaly: the server
//! granted somewhere between invoke and completion, so a lease certainly lasted until
//! `invoke + ttl` and certainly ended by `completion + ttl` (Redis keeps a key alive
//! while `now <= deadline`, deadlines in whole milliseconds of the same wall clock).

use std::collections::HashMap;

use super::history::{Op, Outcome, Request};
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

/// The refreshes and releases of the holding `grant` started, in the order sent.
fn follow_ups<'a>(grant: &Op, ops_of_key: &[&'a Op]) -> Vec<&'a Op> {
    let token = grant.token();
    let mut later: Vec<&Op> = ops_of_key
        .iter()
        .copied()
        .filter(|op| {
            op.client == grant.client
                && (op.is_refresh() || op.is_release())
                && op.token() == token
                && op.invoked_us >= grant.invoked_us
        })
        .collect();
    later.sort_by_key(|op| op.invoked_us);
    later
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

/// The interval during which an acknowledged grant was certainly held and relied on:
/// from its reply until its holder sent a release (whatever came back: from then on
/// the holder claims nothing, and the release may have freed the lock), or until its
/// latest certain deadline.
fn certainly_held(grant: &Op, follow_ups: &[&Op]) -> (i64, i64) {
    let ttl = grant.ttl_ms().unwrap_or(0);
    let mut deadline_ms = grant.invoked_us / 1_000 + ttl;
    let mut proven_until = grant.completed_us;
    for op in follow_ups {
        if op.is_release() {
            // An acknowledged release proves the lease lasted until it was sent.
            let end = if op.acked_yes() {
                op.invoked_us
            } else {
                op.invoked_us.min(proven_until.max(deadline_ms * 1_000))
            };
            return (grant.completed_us, end);
        }
        if op.acked_yes() {
            // A successful refresh proves the lease never lapsed until then: nothing
            // revives a lapsed lease.
            proven_until = proven_until.max(op.invoked_us);
            if let Some(ttl) = op.ttl_ms() {
                deadline_ms = deadline_ms.max(op.invoked_us / 1_000 + ttl);
            }
        }
    }
    (grant.completed_us, proven_until.max(deadline_ms * 1_000))
}

/// No two acknowledged holders of one key with certainly-unexpired leases overlap.
pub fn mutual_exclusion(ops: &[Op]) -> Vec<String> {
    let mut anomalies = Vec::new();
    for (key, ops) in by_key(ops) {
        let mut held: Vec<(i64, i64, &Op)> = ops
            .iter()
            .filter(|op| op.fence().is_some() && op.acked_yes())
            .map(|grant| {
                let (start, end) = certainly_held(grant, &follow_ups(grant, &ops));
                (start, end, *grant)
            })
            .filter(|(start, end, _)| start < end)
            .collect();
        held.sort_by_key(|(start, _, _)| *start);
        let mut latest: Option<(i64, &Op)> = None;
        for (start, end, grant) in held {
            if let Some((until, other)) = latest {
                if start + SLACK_US < until {
                    anomalies.push(format!(
                        "{key}: two holders: {} held until {until} us, {} held from {start} us",
                        describe(other),
                        describe(grant)
                    ));
                }
            }
            if latest.is_none_or(|(until, _)| end > until) {
                latest = Some((end, grant));
            }
        }
    }
    anomalies
}

/// Overlaps that `mutual_exclusion` reports, counted (for scenarios where acknowledged
/// writes may be lost by design and overlaps are a measured figure, not a failure).
pub fn overlap_count(ops: &[Op]) -> usize {
    mutual_exclusion(ops).len()
}

/// No refresh or release succeeds once the lease it names has certainly ended.
pub fn no_revival(ops: &[Op]) -> Vec<String> {
    let mut anomalies = Vec::new();
    for (key, ops) in by_key(ops) {
        for grant in ops.iter().filter(|op| op.fence().is_some()) {
            let ttl = grant.ttl_ms().unwrap_or(0);
            let mut ends_by_ms = Some(grant.completed_us / 1_000 + ttl);
            for op in follow_ups(grant, &ops) {
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
}

pub fn tally(ops: &[Op]) -> Tally {
    Tally {
        ops: ops.len(),
        grants: ops.iter().filter(|op| op.fence().is_some()).count(),
        unknown: ops.iter().filter(|op| op.maybe()).count(),
    }
}

/// The checks every scenario must pass whatever its fault: well-formed replies, fences
/// increasing in real-time order, no lease revived after it ended.
pub fn always_required(ops: &[Op]) -> Vec<String> {
    let mut anomalies = malformed_replies(ops);
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
/// mutual exclusion, and no stale write accepted by the fenced resource.
pub fn fenced_run(finished: &Finished) -> Vec<String> {
    let mut anomalies = always_required(&finished.ops);
    anomalies.extend(mutual_exclusion(&finished.ops));
    anomalies.extend(stale_writes(finished));
    anomalies
}
