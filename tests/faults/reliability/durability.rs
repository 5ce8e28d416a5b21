//! What must survive a crash: after a restart, every key's state is compared with what
//! was acknowledged before the crash. Every acknowledged holding, exclusive, shared or
//! semaphore, must still be there with its fence (unless its lease may have run out by
//! now, or a release of it was in flight), and the key's deadline may be no earlier than
//! any of their acknowledged leases; an acknowledged release must not come back; and no
//! holding older than an acknowledged exclusive grant may be back (it had to be gone for
//! that grant).
//!
//! A difference is a *loss*. Under `appendfsync always` every loss is an anomaly; under
//! `everysec` losses are the measured price, and `window_us` how far back they reach.
//!
//! Session holdings are read back per session (`LOCK.HELD`), as a client resuming after
//! the restart (or a failover) would see them: every holding believed before the crash
//! whose lease certainly outlasts the reading must be listed with its key, mode and fence
//! and a lease no shorter than the belief (else a loss), none its holder had settled may
//! be (a loss); and, whatever was lost, every one listed must be a grant its session
//! asked for, with no longer a lease than anything sent can have given it (a *revival*:
//! always an anomaly).

use std::collections::HashMap;

use redis::{Connection, Value};

use super::belief::{Ended, Sessions, SLACK_US};
use super::history::{now_us, Mode, Op, Outcome};
use super::holding::Holding;

/// What the restarted server shows.
#[derive(Debug, Default, Clone)]
pub struct Found {
    /// Per key: its fence (`LOCK.FENCE key`: the highest live one) and `PEXPIRETIME`
    /// (-2 when the key is missing).
    pub keys: HashMap<String, (Option<i64>, i64)>,
    /// Per holder read: `LOCK.FENCE key token`, its fence if the token holds the key.
    pub holders: HashMap<(String, String), Option<i64>>,
}

/// An acknowledged effect the restarted server does not show.
#[derive(Debug, Clone)]
pub struct Loss {
    pub what: String,
    /// From the acknowledgement of the lost effect to the crash.
    pub window_us: i64,
}

/// The holders to read back: (key, token) of every acknowledged grant sent before the
/// crash.
pub fn holders_to_read(ops: &[Op], crash_us: i64) -> Vec<(String, String)> {
    ops.iter()
        .filter(|op| op.invoked_us < crash_us && op.acked_yes())
        .filter_map(|op| Some((op.key.clone(), op.fence().and(op.token())?.to_string())))
        .collect()
}

/// Reads `LOCK.FENCE` and `PEXPIRETIME` of every key and `LOCK.FENCE key token` of every
/// holder in one round trip; returns what was found and the time the reading finished.
pub fn observe(
    con: &mut Connection,
    keys: &[String],
    holders: &[(String, String)],
) -> (Found, i64) {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("LOCK.FENCE").arg(key).cmd("PEXPIRETIME").arg(key);
    }
    for (key, token) in holders {
        pipe.cmd("LOCK.FENCE").arg(key).arg(token);
    }
    let replies: Vec<Value> = pipe.query(con).expect("read state after restart");
    let at = now_us();
    let int = |reply: &Value| match reply {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let (of_keys, of_holders) = replies.split_at(keys.len() * 2);
    let found = Found {
        keys: keys
            .iter()
            .zip(of_keys.chunks(2))
            .map(|(key, pair)| (key.clone(), (int(&pair[0]), int(&pair[1]).unwrap_or(-2))))
            .collect(),
        holders: holders
            .iter()
            .cloned()
            .zip(of_holders.iter().map(int))
            .collect(),
    };
    (found, at)
}

/// The verdict over all keys after one restart.
pub struct Judged {
    pub losses: Vec<Loss>,
    /// Acknowledged holdings that had to be there, and were, with their fence.
    pub verified: usize,
}

/// Compares `found` (read at `observed_us`) with the acknowledged history before
/// `crash_us`. Keys touched by an operation sent after the crash are skipped.
pub fn losses(ops: &[Op], crash_us: i64, found: &Found, observed_us: i64) -> Judged {
    let mut judged = Judged {
        losses: Vec::new(),
        verified: 0,
    };
    for (key, &(key_fence, key_deadline)) in &found.keys {
        let of_key: Vec<&Op> = ops.iter().filter(|op| &op.key == key).collect();
        if of_key
            .iter()
            .any(|op| op.invoked_us >= crash_us && op.invoked_us <= observed_us)
        {
            continue;
        }
        let before: Vec<&Op> = of_key
            .into_iter()
            .filter(|op| op.invoked_us < crash_us)
            .collect();
        let grants: Vec<&Op> = before
            .iter()
            .copied()
            .filter(|op| op.acked_yes() && op.fence().is_some())
            .collect();
        // Session holdings move with keepalives and end with closes: `session_holdings`.
        let plain = |grant: &&Op| grant.session().is_none();
        let loss = |what: String, acked_us: i64| Loss {
            what: format!("{key}: {what}"),
            window_us: crash_us - acked_us,
        };
        let exclusive = grants
            .iter()
            .filter(|op| op.mode() == Some(Mode::Exclusive))
            .max_by_key(|op| op.fence());
        if let (Some(found), Some(grant)) = (key_fence, exclusive) {
            if Some(found) < grant.fence() {
                judged.losses.push(loss(
                    format!(
                        "older fence {found} restored after the exclusive grant of {:?}",
                        grant.fence()
                    ),
                    grant.completed_us,
                ));
            }
        }
        // The latest acknowledged deadline among the holdings found, and its holder's
        // latest acknowledgement.
        let mut required: Option<(i64, i64)> = None;
        for grant in grants.into_iter().filter(plain) {
            let Some(held) = grant
                .token()
                .and_then(|token| found.holders.get(&(key.clone(), token.to_string())))
            else {
                continue;
            };
            let holding = Holding::new(grant, &before);
            match judge(&holding, *held, observed_us) {
                Verdict::Lost(what, acked_us) => judged.losses.push(loss(
                    format!("{what} (the key's fence is now {key_fence:?})"),
                    acked_us,
                )),
                Verdict::Verified(deadline_ms) => {
                    judged.verified += 1;
                    if required.is_none_or(|(latest, _)| deadline_ms > latest) {
                        required = Some((deadline_ms, holding.last_ack_us()));
                    }
                }
                Verdict::Allowed => {}
            }
        }
        if let Some((deadline_ms, acked_us)) = required {
            // -1: no expiry at all, which outlasts any lease.
            if key_deadline != -1 && key_deadline < deadline_ms {
                judged.losses.push(loss(
                    format!("deadline {key_deadline} earlier than acknowledged {deadline_ms}"),
                    acked_us,
                ));
            }
        }
    }
    judged
}

enum Verdict {
    /// What was lost, and when it had been acknowledged.
    Lost(String, i64),
    /// The holding had to survive and did; its acknowledged deadline (ms).
    Verified(i64),
    /// Consistent, though the history allowed more than one state.
    Allowed,
}

/// One acknowledged holding against `held`, the fence its token holds after the restart.
fn judge(holding: &Holding, held: Option<i64>, observed_us: i64) -> Verdict {
    let fence = holding.grant.fence().unwrap_or(0);
    match holding.release() {
        Some(release) if release.acked_yes() => {
            return match held {
                Some(_) => Verdict::Lost(
                    format!("released holding with fence {fence} is back"),
                    release.completed_us,
                ),
                None => Verdict::Allowed,
            };
        }
        Some(release) if release.maybe() => return Verdict::Allowed,
        _ => {}
    }
    let deadline_ms = holding.certain_deadline_ms();
    if deadline_ms * 1_000 <= observed_us {
        return Verdict::Allowed;
    }
    if held == Some(fence) {
        Verdict::Verified(deadline_ms)
    } else {
        Verdict::Lost(
            format!("holding with fence {fence} and deadline >= {deadline_ms} missing (its token holds {held:?})"),
            holding.last_ack_us(),
        )
    }
}

/// One holding `LOCK.HELD` listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub mode: String,
    pub fence: i64,
    pub pttl_ms: i64,
}

/// What `LOCK.HELD` showed of every session, and when the reading was sent and done.
#[derive(Debug, Default, Clone)]
pub struct HeldFound {
    pub sessions: HashMap<String, Vec<Listed>>,
    pub sent_us: i64,
    pub observed_us: i64,
}

/// The session names of a history.
pub fn session_names(ops: &[Op]) -> Vec<String> {
    let mut names: Vec<String> = ops
        .iter()
        .filter_map(|op| op.session().map(str::to_string))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// `LOCK.HELD` of every session in one round trip.
pub fn observe_held(con: &mut Connection, sessions: &[String]) -> HeldFound {
    let mut pipe = redis::pipe();
    for session in sessions {
        pipe.cmd("LOCK.HELD").arg(session);
    }
    let sent_us = now_us();
    let replies: Vec<Vec<(String, String, i64, i64)>> = if sessions.is_empty() {
        Vec::new()
    } else {
        pipe.query(con).expect("LOCK.HELD of every session")
    };
    let observed_us = now_us();
    HeldFound {
        sessions: sessions
            .iter()
            .cloned()
            .zip(replies.into_iter().map(|entries| {
                entries
                    .into_iter()
                    .map(|(key, mode, fence, pttl_ms)| Listed {
                        key,
                        mode,
                        fence,
                        pttl_ms,
                    })
                    .collect()
            }))
            .collect(),
        sent_us,
        observed_us,
    }
}

/// The verdict on the sessions after one restart or promotion.
#[derive(Default)]
pub struct SessionsJudged {
    pub losses: Vec<Loss>,
    /// Listed holdings no history explains: anomalies whatever was lost.
    pub revived: Vec<String>,
    /// Believed holdings that had to be listed, and were.
    pub verified: usize,
}

/// The name `LOCK.HELD` gives a mode.
fn held_mode(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
        Mode::Limit(_) => "semaphore",
    }
}

/// Compares what `LOCK.HELD` listed (`found`) with the sessions' history before
/// `crash_us`, the moment whose state the server shows. Sessions that sent anything after
/// it and before the reading are skipped, and so are those with a command sent before it
/// but answered after (its effect may be missing from a snapshot taken meanwhile).
pub fn session_holdings(ops: &[Op], crash_us: i64, found: &HeldFound) -> SessionsJudged {
    let mut judged = SessionsJudged::default();
    let token_session: HashMap<&str, &str> = ops
        .iter()
        .filter_map(|op| Some((op.token()?, op.session()?)))
        .collect();
    let disturbed: Vec<&str> = ops
        .iter()
        .filter(|op| {
            let after = op.invoked_us >= crash_us && op.invoked_us <= found.observed_us;
            let across = op.invoked_us < crash_us
                && op.completed_us >= crash_us
                && !matches!(op.outcome, Outcome::Unknown(_));
            after || across
        })
        .filter_map(|op| {
            op.session()
                .or_else(|| token_session.get(op.token()?).copied())
        })
        .collect();
    let before: Vec<Op> = ops
        .iter()
        .filter(|op| op.invoked_us < crash_us)
        .cloned()
        .collect();
    let sessions = Sessions::of(&before);
    for (session, listed) in &found.sessions {
        if disturbed.contains(&session.as_str()) {
            continue;
        }
        let known: Vec<_> = sessions
            .known
            .iter()
            .filter(|k| k.grant.session() == Some(session.as_str()))
            .collect();
        for entry in listed {
            let granted = known
                .iter()
                .find(|k| k.grant.key == entry.key && k.grant.fence() == Some(entry.fence));
            let at_least_until_us = (found.sent_us / 1_000 + entry.pttl_ms) * 1_000;
            let unexplained = match granted {
                None => {
                    let maybe = known.iter().any(|k| {
                        k.grant.key == entry.key && matches!(k.grant.outcome, Outcome::Unknown(_))
                    });
                    (!maybe).then(|| "never granted to it".to_string())
                }
                Some(k) if k.grant.mode().map(held_mode) != Some(entry.mode.as_str()) => {
                    Some(format!("granted as {:?}", k.grant.mode()))
                }
                Some(k)
                    if k.ceiling_us
                        .is_some_and(|c| at_least_until_us > c + SLACK_US) =>
                {
                    Some(format!(
                        "its lease outlasts anything sent could give it (until {:?} us)",
                        k.ceiling_us
                    ))
                }
                Some(k) if k.settled => {
                    judged.losses.push(Loss {
                        what: format!(
                            "session {session}: settled holding {entry:?} is back (grant {:?})",
                            k.grant
                        ),
                        window_us: crash_us - k.grant.completed_us,
                    });
                    None
                }
                Some(_) => None,
            };
            if let Some(why) = unexplained {
                judged.revived.push(format!(
                    "session {session}: LOCK.HELD lists {entry:?}, {why}"
                ));
            }
        }
        let believed = sessions
            .believed
            .iter()
            .filter(|b| b.grant.session() == Some(session.as_str()))
            .filter(|b| b.grant.completed_us < found.sent_us)
            .filter(|b| b.ended == Ended::RanOut && b.floor_us > found.observed_us + SLACK_US);
        for belief in believed {
            let entry = listed
                .iter()
                .find(|e| e.key == belief.grant.key && Some(e.fence) == belief.grant.fence());
            let acked_us = belief
                .kept_at_us
                .last()
                .copied()
                .unwrap_or(belief.grant.completed_us);
            let at_most_until_us =
                (found.observed_us / 1_000 + 1 + entry.map_or(0, |e| e.pttl_ms)) * 1_000;
            let what = match entry {
                None => Some("missing".to_string()),
                Some(e) if e.pttl_ms != -1 && at_most_until_us + SLACK_US < belief.floor_us => {
                    Some(format!(
                        "listed with a lease until {at_most_until_us} us or less"
                    ))
                }
                Some(_) => None,
            };
            match what {
                Some(what) => judged.losses.push(Loss {
                    what: format!(
                        "session {session}: holding believed until {} us {what} (grant {:?})",
                        belief.floor_us, belief.grant
                    ),
                    window_us: crash_us - acked_us,
                }),
                None => judged.verified += 1,
            }
        }
    }
    judged
}
