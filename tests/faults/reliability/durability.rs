//! What must survive a crash: after a restart, every key's state is compared with what
//! was acknowledged before the crash. The latest acknowledged grant of a key must still
//! be there, with its fence and a deadline no earlier than its acknowledged lease
//! (unless that lease may have run out by now, or a release of it was in flight); an
//! acknowledged release must not come back.
//!
//! A difference is a *loss*. Under `appendfsync always` every loss is an anomaly; under
//! `everysec` losses are the measured price, and `window_us` how far back they reach.

use std::collections::HashMap;

use redis::Connection;

use super::history::{now_us, Op};

/// One key's state as found after the restart: `(fence, absolute deadline ms)`.
pub type Found = Option<(i64, i64)>;

/// An acknowledged effect the restarted server does not show.
#[derive(Debug, Clone)]
pub struct Loss {
    pub what: String,
    /// From the acknowledgement of the lost effect to the crash.
    pub window_us: i64,
}

/// Reads `LOCK.FENCE` and `PEXPIRETIME` of every key in one round trip; returns the
/// states and the time the reading finished.
pub fn observe(con: &mut Connection, keys: &[String]) -> (HashMap<String, Found>, i64) {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("LOCK.FENCE").arg(key).cmd("PEXPIRETIME").arg(key);
    }
    let replies: Vec<redis::Value> = pipe.query(con).expect("read state after restart");
    let at = now_us();
    let states = keys
        .iter()
        .zip(replies.chunks(2))
        .map(|(key, pair)| {
            let state = match pair {
                [redis::Value::Int(fence), redis::Value::Int(deadline)] => {
                    Some((*fence, *deadline))
                }
                _ => None,
            };
            (key.clone(), state)
        })
        .collect();
    (states, at)
}

/// The verdict over all keys after one restart.
pub struct Judged {
    pub losses: Vec<Loss>,
    /// Keys whose acknowledged holding had to be there, and was, with fence and deadline.
    pub verified: usize,
}

/// Compares `found` (read at `observed_us`) with the acknowledged history before
/// `crash_us`. Keys touched by an operation sent after the crash are skipped.
pub fn losses(
    ops: &[Op],
    crash_us: i64,
    found: &HashMap<String, Found>,
    observed_us: i64,
) -> Judged {
    let mut judged = Judged {
        losses: Vec::new(),
        verified: 0,
    };
    for (key, state) in found {
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
        let Some(last) = before
            .iter()
            .filter(|op| op.acked_yes() && op.fence().is_some())
            .max_by_key(|op| op.fence())
        else {
            continue;
        };
        match judge(last, &before, *state, crash_us, observed_us) {
            Verdict::Lost(loss) => judged.losses.push(loss),
            Verdict::Verified => judged.verified += 1,
            Verdict::Allowed => {}
        }
    }
    judged
}

enum Verdict {
    Lost(Loss),
    /// The holding had to survive and did.
    Verified,
    /// Consistent, though the history allowed more than one state.
    Allowed,
}

fn judge(last: &Op, before: &[&Op], state: Found, crash_us: i64, observed_us: i64) -> Verdict {
    let Some(fence) = last.fence() else {
        return Verdict::Allowed;
    };
    let token = last.token();
    let follow: Vec<&&Op> = before
        .iter()
        .filter(|op| op.client == last.client && op.token() == token && op.fence().is_none())
        .collect();
    let acked_release = follow.iter().find(|op| op.is_release() && op.acked_yes());
    let release_in_flight = follow.iter().any(|op| op.is_release() && op.maybe());
    let mut deadline_ms = last.invoked_us / 1_000 + last.ttl_ms().unwrap_or(0);
    let mut last_ack_us = last.completed_us;
    for op in follow.iter().filter(|op| op.is_refresh() && op.acked_yes()) {
        deadline_ms = deadline_ms.max(op.invoked_us / 1_000 + op.ttl_ms().unwrap_or(0));
        last_ack_us = last_ack_us.max(op.completed_us);
    }
    let loss = |what: String, acked_us: i64| Loss {
        what: format!("{}: {what}", last.key),
        window_us: crash_us - acked_us,
    };
    if let Some(release) = acked_release {
        return match state {
            Some((found, _)) if found <= fence => Verdict::Lost(loss(
                format!("released fence {fence} is back (found {found})"),
                release.completed_us,
            )),
            _ => Verdict::Allowed,
        };
    }
    let may_have_ended = deadline_ms * 1_000 <= observed_us || release_in_flight;
    let verdict = match state {
        None if !may_have_ended => Some(loss(
            format!("grant with fence {fence} and deadline >= {deadline_ms} missing"),
            last_ack_us,
        )),
        Some((found, _)) if found < fence => Some(loss(
            format!("older fence {found} restored instead of {fence}"),
            last_ack_us,
        )),
        Some((found, deadline)) if found == fence && deadline < deadline_ms => Some(loss(
            format!("deadline {deadline} earlier than acknowledged {deadline_ms}"),
            last_ack_us,
        )),
        Some((found, _))
            if found > fence && deadline_ms * 1_000 > crash_us && !release_in_flight =>
        {
            Some(loss(
                format!("fence {fence} superseded by {found} while its lease was live"),
                last_ack_us,
            ))
        }
        _ => None,
    };
    match verdict {
        Some(lost) => Verdict::Lost(lost),
        None if !may_have_ended && state.is_some_and(|(found, _)| found == fence) => {
            Verdict::Verified
        }
        None => Verdict::Allowed,
    }
}
