//! Checks over a recorded history. Each returns the anomalies it found, as sentences
//! naming the operations involved; an empty list means the property held. How long a
//! holding certainly lasted, and why the bounds cannot invent an anomaly: `holding`; how
//! long a session client believed its holdings, and what the server can have done with
//! them: `belief`.

use std::collections::{BTreeMap, HashMap};

use super::belief::{Sessions, SLACK_US};
use super::history::{Mode, Op, Outcome, Request};
use super::holding::Holding;
use super::workload::Finished;

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
    const BLAMING: [&str; 6] = [
        "WRONGMODE",
        "WRONGSESSION",
        "syntax error",
        "invalid limit",
        "invalid session",
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

/// How long one grant held its key, for the sweep: from its reply to `end`; `held_until`
/// is where its holding ended and a quarantine (lock-delay) began, when `end` is later.
struct Stretch<'a> {
    start: i64,
    end: i64,
    held_until: i64,
    grant: &'a Op,
}

/// The stretches of every acknowledged grant, by key: a plain grant certainly held
/// (`Holding::certainly_held`), a session grant believed (`belief`); with `quarantines`,
/// a session grant whose lease certainly ran into its lock-delay keeps its key until the
/// quarantine's certain end.
fn stretches(ops: &[Op], quarantines: bool) -> HashMap<&str, Vec<Stretch<'_>>> {
    let sessions = Sessions::of(ops);
    let believed: HashMap<&str, (i64, Option<i64>)> = sessions
        .believed
        .iter()
        .filter_map(|b| Some((b.grant.token()?, (b.until_us, b.quarantined_until_us()))))
        .collect();
    let mut keys: HashMap<&str, Vec<Stretch>> = HashMap::new();
    for (key, ops) in by_key(ops) {
        let stretches = ops
            .iter()
            .filter(|op| op.fence().is_some() && op.acked_yes())
            .filter_map(|grant| {
                let start = grant.completed_us;
                let (held_until, quarantined) = if grant.session().is_some() {
                    *believed.get(grant.token()?)?
                } else {
                    (Holding::new(grant, &ops).certainly_held().1, None)
                };
                let end = match quarantined {
                    Some(until) if quarantines => until.max(held_until),
                    _ => held_until,
                };
                (start < end).then_some(Stretch {
                    start,
                    end,
                    held_until,
                    grant,
                })
            })
            .collect();
        keys.insert(key, stretches);
    }
    keys
}

/// Sweeps the stretches of each key in order of their start: when one starts, those
/// still live with it (ending more than the slack after) may not outnumber what the most
/// demanding of them admits: an exclusive holder nobody else, a semaphore holder `n` in
/// all, a shared holder any number. With `in_quarantine`, only the excesses where one of
/// those live is past its holding, in its quarantine, are reported (as lock-delay
/// anomalies); otherwise every excess is.
fn sweep(keys: HashMap<&str, Vec<Stretch>>, in_quarantine: bool) -> Holds {
    let mut holds = Holds {
        anomalies: Vec::new(),
        peaks: BTreeMap::new(),
    };
    for (key, mut held) in keys {
        held.sort_by_key(|stretch| stretch.start);
        let mut live: Vec<Stretch> = Vec::new();
        for stretch in held {
            let start = stretch.start;
            live.retain(|other| other.end - SLACK_US > start);
            let grant = stretch.grant;
            live.push(stretch);
            let mode = mode_of(grant);
            let same_mode = live.iter().filter(|s| mode_of(s.grant) == mode).count();
            let peak = holds.peaks.entry(mode).or_default();
            *peak = (*peak).max(same_mode);
            let admitted = live
                .iter()
                .map(|s| mode_of(s.grant).admits())
                .min()
                .unwrap_or(usize::MAX);
            let quarantined = live
                .iter()
                .any(|s| !std::ptr::eq(s.grant, grant) && s.held_until - SLACK_US <= start);
            if live.len() > admitted && (!in_quarantine || quarantined) {
                let others: Vec<String> = live
                    .iter()
                    .filter(|other| !std::ptr::eq(other.grant, grant))
                    .map(|other| {
                        let quarantine = if other.end > other.held_until {
                            format!(", then quarantined until {} us", other.end)
                        } else {
                            String::new()
                        };
                        format!(
                            "{} held until {} us{quarantine}",
                            describe(other.grant),
                            other.held_until
                        )
                    })
                    .collect();
                let what = if in_quarantine {
                    "granted during a lock-delay: "
                } else {
                    ""
                };
                holds.anomalies.push(format!(
                    "{key}: {what}{} holders at once where {admitted} may hold: {} held from {start} us while {}",
                    live.len(),
                    describe(grant),
                    others.join("; ")
                ));
            }
        }
    }
    holds
}

/// Holders of each key certainly live together (plain grants certainly held, session
/// grants believed), against what their modes admit.
pub fn holds(ops: &[Op]) -> Holds {
    sweep(stretches(ops, false), false)
}

/// After a session holding's lease certainly ran out into its lock-delay, nobody was
/// granted its key (or, shared, its room) before the delay passed: the sweep of `holds`
/// with each such holding keeping its key until the floor of its lease plus the delay.
pub fn lock_delays(ops: &[Op]) -> Vec<String> {
    sweep(stretches(ops, true), true).anomalies
}

/// How the lock-delays were put to the test.
#[derive(Debug, Default)]
pub struct DelaysTested {
    /// Session holdings whose lease certainly ran into its lock-delay.
    pub entered: usize,
    /// Those held exclusively whose key was granted again later (to anyone).
    pub followed: usize,
    /// The least margin (ms) between such a quarantine's certain end and the reply of
    /// the next grant of its key (negative: granted before the delay passed).
    pub least_margin_ms: Option<i64>,
}

pub fn lock_delays_tested(ops: &[Op]) -> DelaysTested {
    let sessions = Sessions::of(ops);
    let keys = by_key(ops);
    let mut tested = DelaysTested::default();
    for (belief, until) in sessions.quarantines() {
        tested.entered += 1;
        if mode_of(belief.grant) != Mode::Exclusive {
            continue;
        }
        let next = keys
            .get(belief.grant.key.as_str())
            .into_iter()
            .flatten()
            .filter(|op| op.fence() > belief.grant.fence() && op.acked_yes())
            .map(|op| op.completed_us)
            .min();
        if let Some(next) = next {
            tested.followed += 1;
            let margin = (next - until) / 1_000;
            tested.least_margin_ms = Some(tested.least_margin_ms.map_or(margin, |m| m.min(margin)));
        }
    }
    tested
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
        // A session holding's lease moves with its session's keepalives: `belief`.
        for grant in ops
            .iter()
            .filter(|op| op.fence().is_some() && op.session().is_none())
        {
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
    /// `LOCK.ACQUIREALL`s sent, and those granted (each counted once, not per key).
    pub several_asked: usize,
    pub several_granted: usize,
}

pub fn tally(ops: &[Op]) -> Tally {
    let mut grants_by_mode: BTreeMap<Mode, usize> = BTreeMap::new();
    for grant in ops.iter().filter(|op| op.fence().is_some()) {
        *grants_by_mode.entry(mode_of(grant)).or_default() += 1;
    }
    // One op per key: a `LOCK.ACQUIREALL` is its first key's op.
    let several: Vec<&Op> = ops
        .iter()
        .filter(|op| matches!(&op.request, Request::AcquireAll { keys, .. } if keys.first() == Some(&op.key)))
        .collect();
    Tally {
        ops: ops.len(),
        grants: grants_by_mode.values().sum(),
        unknown: ops.iter().filter(|op| op.maybe()).count(),
        grants_by_mode,
        peaks: holds(ops).peaks,
        several_asked: several.len(),
        several_granted: several.iter().filter(|op| op.fence().is_some()).count(),
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
            "grants by mode: {}; most holders certainly live at once: {}; LOCK.ACQUIREALL granted {} of {}",
            list(&self.grants_by_mode),
            list(&self.peaks),
            self.several_granted,
            self.several_asked
        )
    }

    /// Why the holder limits were not put to the test, if they were not: a semaphore
    /// that never had as many certainly-live holders as it admits, shared holders that
    /// never held together, an exclusive mode that was never granted; grants of several
    /// keys asked for and never made.
    pub fn limits_untested(&self) -> Vec<String> {
        let several = (self.several_asked > 0 && self.several_granted == 0).then(|| {
            format!(
                "LOCK.ACQUIREALL asked {} times, never granted",
                self.several_asked
            )
        });
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
            .chain(several)
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

/// Session holdings revived or counted where nothing can still be live, whatever a
/// crash lost; and commands of one session sent while another was in flight (the rule
/// the beliefs rest on).
pub fn session_revivals(ops: &[Op]) -> Vec<String> {
    let sessions = Sessions::of(ops);
    let mut anomalies = sessions.interleaved;
    anomalies.extend(sessions.revivals);
    anomalies
}

/// Where nothing acknowledged may be lost: no believed session holding missing while
/// certainly within its lease, no keepalive or close counting a holding its session had
/// settled.
pub fn session_losses(ops: &[Op]) -> Vec<String> {
    let sessions = Sessions::of(ops);
    let mut anomalies = sessions.losses;
    anomalies.extend(sessions.overcounts);
    anomalies
}

/// The checks every scenario must pass whatever its fault: well-formed replies, no
/// request refused as wrong, fences increasing in real-time order, no lease revived
/// after it ended (plain or in a session).
pub fn always_required(ops: &[Op]) -> Vec<String> {
    let mut anomalies = malformed_replies(ops);
    anomalies.extend(refused_requests(ops));
    anomalies.extend(fences_increase(ops));
    anomalies.extend(no_revival(ops));
    anomalies.extend(session_revivals(ops));
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
/// no more holders at once than their modes admit, no stale write accepted by the
/// fenced resource; and of sessions, no believed holding lost, none counted once
/// settled, no lock-delay cut short.
pub fn fenced_run(finished: &Finished) -> Vec<String> {
    let mut anomalies = always_required(&finished.ops);
    anomalies.extend(holder_limits(&finished.ops));
    anomalies.extend(stale_writes(finished));
    anomalies.extend(session_losses(&finished.ops));
    anomalies.extend(lock_delays(&finished.ops));
    anomalies
}
