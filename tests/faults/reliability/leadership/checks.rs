//! Judging an election history: the campaigns, refreshes and resignations as the
//! suite's `Op`s for `checker`, then the election's own checks (fenced work in order,
//! observations real, observers answered once per change, long leaderships seen, final
//! states, the log in order) and the figures of a run.

use std::collections::{HashMap, HashSet};

use super::*;
use crate::reliability::belief::SLACK_US;
use crate::reliability::checker;
use crate::reliability::history::{Mode, Op, Outcome, Request};
use crate::reliability::holding::Holding;

fn describe(event: &Event) -> String {
    format!(
        "client {} {:?} at {}..{} us -> {:?} (node {}{})",
        event.client,
        event.act,
        event.invoked_us,
        event.completed_us,
        event.answer,
        event.node,
        if event.confirmed { "" } else { ", unconfirmed" }
    )
}

/// The campaigns, refreshes and resignations as the suite's lock operations on `KEY`.
pub fn as_ops(events: &[Event]) -> Vec<Op> {
    events
        .iter()
        .filter_map(|event| {
            let request = match &event.act {
                Act::Campaign {
                    ttl_ms, block_ms, ..
                } => Request::Acquire {
                    ttl_ms: *ttl_ms,
                    block_ms: Some(*block_ms),
                    mode: Mode::Exclusive,
                },
                Act::Refresh { token, ttl_ms } => Request::Refresh {
                    token: token.clone(),
                    ttl_ms: *ttl_ms,
                },
                Act::Resign { token } => Request::Release {
                    token: token.clone(),
                },
                _ => return None,
            };
            let outcome = match &event.answer {
                Answer::Granted { token, fence } => Outcome::Granted {
                    token: token.clone(),
                    fence: *fence,
                },
                Answer::Nil => Outcome::Busy,
                Answer::Int(n) => Outcome::Done(*n == 1),
                Answer::Failed(text) | Answer::Stale(text) => Outcome::Failed(text.clone()),
                Answer::Unknown(text) => Outcome::Unknown(text.clone()),
                other => Outcome::Failed(format!("unexpected {other:?}")),
            };
            Some(Op {
                client: event.client,
                key: KEY.into(),
                request,
                invoked_us: event.invoked_us,
                completed_us: event.completed_us,
                outcome,
                node: event.node,
                confirmed: event.confirmed,
            })
        })
        .collect()
}

/// Every check of a history, as sentences naming the events involved.
pub fn check(events: &[Event]) -> Vec<String> {
    let ops = as_ops(events);
    let mut anomalies = checker::malformed_replies(&ops);
    anomalies.extend(checker::fences_increase(&ops));
    anomalies.extend(checker::holder_limits(&ops));
    anomalies.extend(checker::no_revival(&ops));
    anomalies.extend(checker::later_nodes_fence_higher(&ops));
    anomalies.extend(refused(events));
    anomalies.extend(work_in_order(events));
    anomalies.extend(observed_real(events));
    anomalies.extend(observers_not_stale(events, &ops));
    anomalies.extend(observers_answer_changes(events));
    anomalies.extend(leaders_seen(events, &ops, LONG_LEADERSHIP_US));
    anomalies
}

/// Error replies that blame the request or show a broken reply: none may come.
pub fn refused(events: &[Event]) -> Vec<String> {
    const BLAMING: [&str; 6] = [
        "unexpected",
        "syntax",
        "WRONGMODE",
        "WRONGTYPE",
        "invalid",
        "too many",
    ];
    events
        .iter()
        .filter(|e| {
            matches!(&e.answer, Answer::Failed(text) if BLAMING.iter().any(|b| text.contains(b)))
        })
        .map(|e| format!("refused or malformed: {}", describe(e)))
        .collect()
}

/// No fenced work with an older fence admitted after one with a newer fence was.
pub fn work_in_order(events: &[Event]) -> Vec<String> {
    let mut admitted: Vec<(&Event, i64)> = events
        .iter()
        .filter(|e| e.answer == Answer::Admitted && e.confirmed)
        .filter_map(|e| match e.act {
            Act::Work { fence, .. } => Some((e, fence)),
            _ => None,
        })
        .collect();
    let mut by_completion = admitted.clone();
    by_completion.sort_by_key(|(e, _)| e.completed_us);
    admitted.sort_by_key(|(e, _)| e.invoked_us);
    let mut anomalies = Vec::new();
    let mut done = 0;
    let mut highest: Option<(&Event, i64)> = None;
    for (work, fence) in admitted {
        while done < by_completion.len() && by_completion[done].0.completed_us < work.invoked_us {
            if highest.is_none_or(|(_, h)| by_completion[done].1 > h) {
                highest = Some(by_completion[done]);
            }
            done += 1;
        }
        if let Some((newer, _)) = highest.filter(|(_, h)| *h > fence) {
            anomalies.push(format!(
                "older fenced work admitted after newer: {} after {}",
                describe(work),
                describe(newer)
            ));
        }
    }
    anomalies
}

/// The fences in the leader's log on the server (`LRANGE election:log 0 -1`, entries
/// `fence:client:round`) never go down.
pub fn log_in_order(entries: &[String]) -> Vec<String> {
    let fences: Vec<i64> = entries
        .iter()
        .filter_map(|e| e.split(':').next()?.parse().ok())
        .collect();
    fences
        .windows(2)
        .enumerate()
        .filter(|(_, pair)| pair[1] < pair[0])
        .map(|(at, pair)| {
            format!(
                "the log admitted fence {} after {} (entries {} and {})",
                pair[1],
                pair[0],
                at,
                at + 1
            )
        })
        .collect()
}

/// A value's campaign (`c<id>.<n>`) and its proclaim number (0 for the campaign's own).
fn value_parts(value: &str) -> (&str, usize) {
    match value.rsplit_once(".p") {
        Some((campaign, n)) => match n.parse() {
            Ok(n) => (campaign, n),
            Err(_) => (value, 0),
        },
        None => (value, 0),
    }
}

/// Every observed leader is one that was granted (or whose campaign's answer was lost)
/// with that fence, and every observed value one its leader asked for; "free" carries
/// no value.
pub fn observed_real(events: &[Event]) -> Vec<String> {
    let campaigns: HashMap<&str, &Event> = events
        .iter()
        .filter_map(|e| match &e.act {
            Act::Campaign { value, .. } => Some((value.as_str(), e)),
            _ => None,
        })
        .collect();
    let proclaims: HashMap<&str, &Event> = events
        .iter()
        .filter_map(|e| match &e.act {
            Act::Proclaim { value, .. } => Some((value.as_str(), e)),
            _ => None,
        })
        .collect();
    let mut anomalies = Vec::new();
    for event in events {
        let Answer::Observed { fence, value } = &event.answer else {
            continue;
        };
        let wrong = match (fence, value.as_deref()) {
            (0, None) => None,
            (0, Some(_)) => Some("a free lock with a value".to_string()),
            (_, None | Some("")) => Some("a leader without its value".to_string()),
            (fence, Some(value)) => {
                let (campaign, proclaimed) = value_parts(value);
                match campaigns.get(campaign).map(|c| &c.answer) {
                    None => Some(format!("a value nobody campaigned with: {value}")),
                    Some(Answer::Granted { fence: granted, .. }) if granted != fence => Some(
                        format!("{value} was granted fence {granted}, observed with {fence}"),
                    ),
                    Some(Answer::Granted { .. } | Answer::Unknown(_)) => None,
                    Some(other) => Some(format!("{value}'s campaign was answered {other:?}")),
                }
                .or_else(|| {
                    (proclaimed > 0)
                        .then(|| match proclaims.get(value).map(|p| &p.answer) {
                            None => Some(format!("{value} was never proclaimed")),
                            Some(Answer::Int(0) | Answer::Failed(_)) => {
                                Some(format!("{value} was proclaimed and refused"))
                            }
                            Some(_) => None,
                        })
                        .flatten()
                })
            }
        };
        if let Some(wrong) = wrong {
            anomalies.push(format!("observer saw {wrong}: {}", describe(event)));
        }
    }
    anomalies
}

/// No observation answered with a state already gone before it was sent: a leader
/// succeeded by an acknowledged grant completed before, an older value of a leader whose
/// later proclaim was acknowledged before, or "free" while a leadership was certainly
/// held from before it was sent until after it was answered.
pub fn observers_not_stale(events: &[Event], ops: &[Op]) -> Vec<String> {
    let grants: Vec<(i64, &str, i64)> = events
        .iter()
        .filter_map(|e| {
            let (fence, token) = e.acked_grant()?;
            Some((fence, token, e.completed_us))
        })
        .collect();
    let fence_of: HashMap<&str, i64> = grants.iter().map(|(f, t, _)| (*t, *f)).collect();
    // Acknowledged proclaims: (fence, proclaim number, completed).
    let proclaims: Vec<(i64, usize, i64)> = events
        .iter()
        .filter(|e| e.answer == Answer::Int(1) && e.confirmed)
        .filter_map(|e| match &e.act {
            Act::Proclaim { token, value } => Some((
                *fence_of.get(token.as_str())?,
                value_parts(value).1,
                e.completed_us,
            )),
            _ => None,
        })
        .collect();
    let ops_of_key: Vec<&Op> = ops.iter().collect();
    let held: Vec<(i64, i64, &Op)> = ops
        .iter()
        .filter(|op| op.fence().is_some() && op.acked_yes())
        .map(|grant| {
            let (from, until) = Holding::new(grant, &ops_of_key).certainly_held();
            (from, until, grant)
        })
        .collect();
    let mut anomalies = Vec::new();
    for event in events {
        let Some((fence, value)) = event.observed() else {
            continue;
        };
        let sent = event.invoked_us;
        let stale = if fence == 0 {
            held.iter()
                .find(|(from, until, _)| *from < sent && until - SLACK_US > event.completed_us)
                .map(|(_, until, grant)| {
                    format!(
                        "free while fence {} was certainly held until {until} us",
                        grant.fence().unwrap_or(0)
                    )
                })
        } else if let Some((newer, _, at)) = grants
            .iter()
            .find(|(newer, _, at)| *newer > fence && *at < sent)
        {
            Some(format!(
                "fence {fence} after fence {newer} was granted at {at} us"
            ))
        } else {
            let seen = value_parts(value).1;
            proclaims
                .iter()
                .find(|(f, n, at)| *f == fence && *n > seen && *at < sent)
                .map(|(_, n, at)| format!("{value} after proclaim {n} was acknowledged at {at} us"))
        };
        if let Some(stale) = stale {
            anomalies.push(format!("stale observation: {stale}: {}", describe(event)));
        }
    }
    anomalies
}

/// Each observer is answered only when the state differs from what it sent, and never
/// twice with the same leader state (fences only grow and values are never reused, so
/// a leader state comes once).
pub fn observers_answer_changes(events: &[Event]) -> Vec<String> {
    let mut seen: HashMap<usize, HashSet<(i64, String)>> = HashMap::new();
    let mut anomalies = Vec::new();
    for event in events.iter().filter(|e| e.is_observe()) {
        let (
            Some((fence, value)),
            Act::Observe {
                fence: f, value: v, ..
            },
        ) = (event.observed(), &event.act)
        else {
            continue;
        };
        if fence == *f && value == v {
            anomalies.push(format!(
                "observer answered without a change: {}",
                describe(event)
            ));
        }
        if fence != 0
            && !seen
                .entry(event.client)
                .or_default()
                .insert((fence, value.into()))
        {
            anomalies.push(format!(
                "observer answered twice with one state: {}",
                describe(event)
            ));
        }
    }
    anomalies
}

/// A leadership certainly held at least this long must be seen by every observer that
/// was answering throughout it.
pub const LONG_LEADERSHIP_US: i64 = 500_000;

/// Every leadership certainly held for `long_us` or more, entirely while an observer was
/// answering (between its first and last answers), was seen by that observer.
pub fn leaders_seen(events: &[Event], ops: &[Op], long_us: i64) -> Vec<String> {
    let mut observers: HashMap<usize, (i64, i64, HashSet<i64>)> = HashMap::new();
    for event in events.iter().filter(|e| e.is_observe()) {
        if let Some((fence, _)) = event.observed() {
            let entry = observers.entry(event.client).or_insert((
                event.completed_us,
                event.completed_us,
                HashSet::new(),
            ));
            entry.0 = entry.0.min(event.completed_us);
            entry.1 = entry.1.max(event.completed_us);
            entry.2.insert(fence);
        }
    }
    let ops_of_key: Vec<&Op> = ops.iter().collect();
    let mut anomalies = Vec::new();
    for grant in ops
        .iter()
        .filter(|op| op.fence().is_some() && op.acked_yes())
    {
        let (from, until) = Holding::new(grant, &ops_of_key).certainly_held();
        if until - from < long_us {
            continue;
        }
        let fence = grant.fence().unwrap_or(0);
        for (observer, (first, last, fences)) in &observers {
            if *first <= from && until <= *last && !fences.contains(&fence) {
                anomalies.push(format!(
                    "observer {observer} never saw fence {fence}, certainly held {from}..{until} us"
                ));
            }
        }
    }
    anomalies
}

/// Each observer's last answer against the server's state at the end.
pub fn final_states(last: &[(usize, Option<(i64, String)>)], truth: &(i64, String)) -> Vec<String> {
    last.iter()
        .filter(|(_, seen)| seen.as_ref() != Some(truth))
        .map(|(observer, seen)| {
            format!("observer {observer} ends on {seen:?}, the leader is {truth:?}")
        })
        .collect()
}

/// The figures of a run.
#[derive(Debug, Default)]
pub struct Figures {
    pub leaderships: usize,
    pub unknown: usize,
    pub admitted: usize,
    pub stale_refused: usize,
    pub proclaims: usize,
    pub observations: usize,
    /// (observer, leadership) pairs where the observer saw the leadership, of all.
    pub leaders_seen: (usize, usize),
}

impl Figures {
    pub fn of(events: &[Event]) -> Self {
        let leaders: HashSet<i64> = events
            .iter()
            .filter_map(|e| Some(e.acked_grant()?.0))
            .collect();
        let mut seen: HashMap<usize, HashSet<i64>> = HashMap::new();
        for event in events {
            if let Some((fence, _)) = event.observed().filter(|(f, _)| leaders.contains(f)) {
                seen.entry(event.client).or_default().insert(fence);
            }
        }
        Figures {
            leaderships: leaders.len(),
            unknown: events
                .iter()
                .filter(|e| matches!(e.answer, Answer::Unknown(_)))
                .count(),
            admitted: events
                .iter()
                .filter(|e| e.answer == Answer::Admitted)
                .count(),
            stale_refused: events
                .iter()
                .filter(|e| matches!(e.answer, Answer::Stale(_)))
                .count(),
            proclaims: events
                .iter()
                .filter(|e| matches!(e.act, Act::Proclaim { .. }) && e.answer == Answer::Int(1))
                .count(),
            observations: events.iter().filter(|e| e.observed().is_some()).count(),
            leaders_seen: (
                seen.values().map(HashSet::len).sum(),
                seen.len() * leaders.len(),
            ),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} leaderships, {} unknown outcomes; fenced work admitted {}, stale work refused {}; {} proclaims; {} observer answers, leaderships seen by observers {} of {}",
            self.leaderships,
            self.unknown,
            self.admitted,
            self.stale_refused,
            self.proclaims,
            self.observations,
            self.leaders_seen.0,
            self.leaders_seen.1
        )
    }
}
