//! The history of run-once claims (`LOCK.ONCE` / `LOCK.DONE`) and its checks: per key,
//! at most one successful run per keep window, every duplicate answered with that run's
//! result (and fence), a result once answered to a duplicate kept for its keep time (no
//! run after it), runs ordered by fence in real time, and never two runs at once (a run
//! is granted only after the one before it stored nothing and ended: its release was
//! sent, or its lease, which began no earlier than its claim was sent, could have run
//! out). Each check returns the anomalies it found, as sentences; an
//! empty list means the property held. Times are wall-clock Unix microseconds, the
//! server's own clock on this machine.

use std::collections::HashMap;

/// How a run ended, as far as its client knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// `LOCK.DONE` answered 1, sent at `sent_us`: the result is stored.
    Stored { sent_us: i64, result: String },
    /// `LOCK.DONE` answered 0: the run had ended before (its lease ran out).
    Refused,
    /// Given up by `LOCK.RELEASE`, sent at `sent_us` (answered 1 or 0).
    Released { sent_us: i64 },
    /// Its client crashed, or lost the reply of its `LOCK.DONE`: the lease ends it, or
    /// the result was stored (`result`, if a `DONE` was sent).
    Unknown { result: Option<String> },
}

/// One claim that was granted the run.
#[derive(Debug, Clone)]
pub struct Run {
    pub client: usize,
    pub key: String,
    pub fence: i64,
    /// When the claim was sent and when its grant was read.
    pub claimed_us: i64,
    pub granted_us: i64,
    pub ttl_ms: i64,
    pub end: RunEnd,
}

/// One claim answered with a stored result.
#[derive(Debug, Clone)]
pub struct Replay {
    pub client: usize,
    pub key: String,
    pub fence: i64,
    pub result: String,
    pub answered_us: i64,
}

/// A whole history: every run and every replay.
#[derive(Debug, Default, Clone)]
pub struct OnceHistory {
    pub runs: Vec<Run>,
    pub replays: Vec<Replay>,
}

/// Slack for the server's millisecond expiry against the history's microseconds.
const SLACK_US: i64 = 2_000;

fn runs_by_key(history: &OnceHistory) -> HashMap<&str, Vec<&Run>> {
    let mut keys: HashMap<&str, Vec<&Run>> = HashMap::new();
    for run in &history.runs {
        keys.entry(run.key.as_str()).or_default().push(run);
    }
    for runs in keys.values_mut() {
        runs.sort_by_key(|run| run.granted_us);
    }
    keys
}

/// Whether the run may have stored a result (its `DONE` answered 1, or was sent and
/// its answer lost).
fn may_have_stored(run: &Run) -> Option<&str> {
    match &run.end {
        RunEnd::Stored { result, .. } => Some(result),
        RunEnd::Unknown { result } => result.as_deref(),
        _ => None,
    }
}

/// At most one successful run per keep window: a run whose result was stored answers
/// every claim for `keep_ms` after; no later run of the key may be granted before that.
pub fn one_success_per_keep(history: &OnceHistory, keep_ms: i64) -> Vec<String> {
    let mut anomalies = Vec::new();
    for (key, runs) in runs_by_key(history) {
        for (at, run) in runs.iter().enumerate() {
            let RunEnd::Stored { sent_us, .. } = &run.end else {
                continue;
            };
            for later in &runs[at + 1..] {
                // The result was stored after its DONE was sent and is kept `keep_ms`
                // from then; the later run was granted before its grant was read.
                if later.claimed_us > run.granted_us
                    && later.granted_us < sent_us + keep_ms * 1_000 - SLACK_US
                {
                    anomalies.push(format!(
                        "{key}: run {} (fence {}) granted within the keep time of run {} \
                         (fence {}), whose result was stored",
                        later.client, later.fence, run.client, run.fence
                    ));
                }
            }
        }
    }
    anomalies
}

/// Every duplicate got the result of a run of its key with the same fence, which
/// stored exactly that result (or may have, its answer lost), and not before that
/// run's `DONE` was sent.
pub fn replays_match_their_run(history: &OnceHistory) -> Vec<String> {
    let mut stored: HashMap<(&str, i64), Option<&str>> = HashMap::new();
    let mut sent: HashMap<(&str, i64), i64> = HashMap::new();
    for run in &history.runs {
        stored.insert((run.key.as_str(), run.fence), may_have_stored(run));
        if let RunEnd::Stored { sent_us, .. } = &run.end {
            sent.insert((run.key.as_str(), run.fence), *sent_us);
        }
    }
    history
        .replays
        .iter()
        .filter_map(|replay| {
            let id = (replay.key.as_str(), replay.fence);
            let found = stored.get(&id);
            match found {
                Some(Some(_)) if sent.get(&id).is_some_and(|&at| replay.answered_us < at) => {
                    Some(format!(
                        "{}: client {} was answered fence {}'s result before it was stored",
                        replay.key, replay.client, replay.fence
                    ))
                }
                Some(Some(result)) if *result == replay.result => None,
                Some(Some(result)) => Some(format!(
                    "{}: client {} was answered {:?} for fence {}, whose run stored {result:?}",
                    replay.key, replay.client, replay.result, replay.fence
                )),
                Some(None) => Some(format!(
                    "{}: client {} was answered a result for fence {}, whose run stored none",
                    replay.key, replay.client, replay.fence
                )),
                None => Some(format!(
                    "{}: client {} was answered a result for fence {}, which no run had",
                    replay.key, replay.client, replay.fence
                )),
            }
        })
        .collect()
}

/// A result answered to a duplicate is kept for its keep time: no run of its key is
/// claimed after that answer and granted before the keep time can have run out. The
/// result was stored after its run's grant was read, so it is kept at least until the
/// grant plus `keep_ms`. This is what a duplicate relies on when it reports the result
/// to its user, whether or not the run's own client learned that `DONE` held.
pub fn replayed_results_kept(history: &OnceHistory, keep_ms: i64) -> Vec<String> {
    let granted: HashMap<(&str, i64), i64> = history
        .runs
        .iter()
        .map(|run| ((run.key.as_str(), run.fence), run.granted_us))
        .collect();
    let runs = runs_by_key(history);
    let mut anomalies = Vec::new();
    for replay in &history.replays {
        let Some(&stored_after_us) = granted.get(&(replay.key.as_str(), replay.fence)) else {
            continue; // replays_match_their_run reports a replay of no run
        };
        let later = runs.get(replay.key.as_str()).into_iter().flatten();
        for run in later.filter(|run| {
            run.fence != replay.fence
                && run.claimed_us > replay.answered_us
                && run.granted_us < stored_after_us + keep_ms * 1_000 - SLACK_US
        }) {
            anomalies.push(format!(
                "{}: run {} (fence {}) granted after client {} was answered the result of                  fence {}, within its keep time",
                replay.key, run.client, run.fence, replay.client, replay.fence
            ));
        }
    }
    anomalies
}

/// Runs of a key are ordered by fence in real time (a run granted before another was
/// claimed has the smaller fence), and never overlap: a run is granted only once the
/// one before it can have ended.
pub fn runs_in_order_one_at_a_time(history: &OnceHistory) -> Vec<String> {
    let mut anomalies = Vec::new();
    for (key, runs) in runs_by_key(history) {
        for pair in runs.windows(2) {
            let [before, after] = pair else { continue };
            if before.granted_us < after.claimed_us && before.fence >= after.fence {
                anomalies.push(format!(
                    "{key}: run {} (fence {}) came after run {} (fence {}) with a lower fence",
                    after.client, after.fence, before.client, before.fence
                ));
            }
            // The earliest the run before can have ended: its DONE or release was
            // processed after it was sent; its lease began no earlier than its claim.
            let ended_us = match &before.end {
                RunEnd::Released { sent_us } | RunEnd::Stored { sent_us, .. } => *sent_us,
                RunEnd::Refused | RunEnd::Unknown { .. } => {
                    before.claimed_us + before.ttl_ms * 1_000 - SLACK_US
                }
            };
            // Only a run claimed after the one before was granted is surely the later.
            if after.claimed_us > before.granted_us && after.granted_us < ended_us {
                anomalies.push(format!(
                    "{key}: run {} (fence {}) was granted while run {} (fence {}) still ran",
                    after.client, after.fence, before.client, before.fence
                ));
            }
        }
    }
    anomalies
}

/// Every check, each anomaly once.
pub fn all_anomalies(history: &OnceHistory, keep_ms: i64) -> Vec<String> {
    let mut anomalies = one_success_per_keep(history, keep_ms);
    anomalies.extend(replays_match_their_run(history));
    anomalies.extend(replayed_results_kept(history, keep_ms));
    anomalies.extend(runs_in_order_one_at_a_time(history));
    anomalies
}
