//! The protected resource on a real server, and every access to it, recorded: a counter
//! per lock key that each holder reads, then writes back incremented (a
//! read-modify-write). The fenced counter is reached through `LOCK.FENCED` with the
//! holder's fence, claimed before the read as the fencing recipes say; the control
//! counter, on the same server, by plain `GET` and `SET`. A write is `SET … GET`, so the
//! server itself says what it overwrote: a *stale write* is an admitted write that
//! overwrote another value than the one its holder read (a lost update).
//!
//! The invariant is the application's: the final counters equal the acknowledged
//! increments. `judge` checks it and the per-write view; with the fence check disabled
//! (a self-test) the "fenced" counter is reached by plain commands, and the same judge
//! must find the stale writes.

use std::sync::{Arc, Mutex, PoisonError};

use redis::{Connection, ErrorKind, Value};

use super::history::now_us;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    Fenced,
    Control,
}

impl Counter {
    fn key(self, lock: &str) -> String {
        match self {
            Counter::Fenced => format!("count:{lock}"),
            Counter::Control => format!("control:{lock}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A read: the value seen.
    Read(u64),
    /// An admitted write, and the value it overwrote.
    Wrote {
        read: u64,
        overwrote: u64,
    },
    /// `STALE`: the mark had seen a higher fence.
    Stale,
    /// No reply (timeout, broken link): the write may or may not have happened.
    Unknown(String),
    Failed(String),
}

#[derive(Clone, Debug)]
pub struct Access {
    pub client: usize,
    pub lock: String,
    pub counter: Counter,
    pub fence: i64,
    pub write: bool,
    pub invoked_us: i64,
    pub completed_us: i64,
    pub answer: Answer,
}

/// Who accesses which lock's counters, under which fence.
#[derive(Clone, Copy)]
pub struct On<'a> {
    pub client: usize,
    pub lock: &'a str,
    pub fence: i64,
}

/// How the holders reach the counters.
#[derive(Clone)]
pub struct Ledger {
    accesses: Arc<Mutex<Vec<Access>>>,
    /// False for the self-test: the fenced counter is reached without `LOCK.FENCED`.
    check_fence: bool,
}

impl Ledger {
    pub fn new(check_fence: bool) -> Self {
        Ledger {
            accesses: Arc::default(),
            check_fence,
        }
    }

    /// Reads `counter` of `lock` under `fence`; `None` when refused or unanswered.
    pub fn read(&self, con: &mut Connection, on: On, counter: Counter) -> Option<u64> {
        match self.access(con, on, counter, None) {
            Answer::Read(value) => Some(value),
            _ => None,
        }
    }

    /// Writes `read + 1` into `counter` of `lock` under `fence`; whether it was admitted.
    pub fn write(&self, con: &mut Connection, on: On, counter: Counter, read: u64) -> bool {
        matches!(
            self.access(con, on, counter, Some(read)),
            Answer::Wrote { .. }
        )
    }

    /// `LOCK.FENCED mark:<lock> <fence>` in front of the fenced counter's command.
    fn fenced(&self, counter: Counter, lock: &str, fence: i64) -> redis::Cmd {
        if counter == Counter::Fenced && self.check_fence {
            let mut command = redis::cmd("LOCK.FENCED");
            command.arg(format!("mark:{lock}")).arg(fence);
            command
        } else {
            redis::Cmd::new()
        }
    }

    /// `GET`, or with `write` (the value read) `SET … GET` of `read + 1`, recorded with
    /// its answer.
    fn access(&self, con: &mut Connection, on: On, counter: Counter, write: Option<u64>) -> Answer {
        let On {
            client,
            lock,
            fence,
        } = on;
        let mut command = self.fenced(counter, lock, fence);
        match write {
            None => command.arg("GET").arg(counter.key(lock)),
            Some(read) => command
                .arg("SET")
                .arg(counter.key(lock))
                .arg(read + 1)
                .arg("GET"),
        };
        let invoked_us = now_us();
        let answer = match command.query::<Value>(con) {
            Ok(reply) => match write {
                None => Answer::Read(number(&reply)),
                Some(read) => Answer::Wrote {
                    read,
                    overwrote: number(&reply),
                },
            },
            Err(error) if error.code() == Some("STALE") => Answer::Stale,
            Err(error) if matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
                Answer::Failed(error.to_string())
            }
            Err(error) => Answer::Unknown(error.to_string()),
        };
        self.accesses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Access {
                client,
                lock: lock.to_string(),
                counter,
                fence,
                write: write.is_some(),
                invoked_us,
                completed_us: now_us(),
                answer: answer.clone(),
            });
        answer
    }

    pub fn accesses(&self) -> Vec<Access> {
        self.accesses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn number(reply: &Value) -> u64 {
    match reply {
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// One counter's figures over a run.
#[derive(Debug, Default, Clone)]
pub struct Judged {
    /// Admitted writes: the increments the holders were told happened.
    pub acknowledged: u64,
    /// Writes that may or may not have happened.
    pub unknown: u64,
    /// Accesses refused as `STALE`.
    pub refused: u64,
    /// Admitted writes that overwrote another holder's update.
    pub stale: u64,
    /// The counters' sum at the end.
    pub total: u64,
    /// Acknowledged increments the counters do not hold.
    pub lost: u64,
    /// What must not happen to a fenced counter.
    pub anomalies: Vec<String>,
}

/// Judges `counter` over `accesses`, against its final values on `con` for `locks`.
pub fn judge(
    accesses: &[Access],
    counter: Counter,
    con: &mut Connection,
    locks: &[String],
) -> Judged {
    let mut judged = Judged::default();
    let mine: Vec<&Access> = accesses.iter().filter(|a| a.counter == counter).collect();
    for access in &mine {
        match &access.answer {
            Answer::Wrote { read, overwrote } => {
                judged.acknowledged += 1;
                if read != overwrote {
                    judged.stale += 1;
                    judged.anomalies.push(format!(
                        "stale write admitted: client {} on {} with fence {} read {read} but overwrote {overwrote} at {}..{} us",
                        access.client, access.lock, access.fence, access.invoked_us, access.completed_us
                    ));
                }
            }
            Answer::Stale => judged.refused += 1,
            Answer::Unknown(_) if access.write => judged.unknown += 1,
            _ => {}
        }
    }
    for lock in locks {
        let value: Option<u64> = redis::cmd("GET")
            .arg(counter.key(lock))
            .query(con)
            .expect("read the final counter");
        judged.total += value.unwrap_or(0);
    }
    judged.lost = judged.acknowledged.saturating_sub(judged.total);
    if judged.total < judged.acknowledged || judged.total > judged.acknowledged + judged.unknown {
        judged.anomalies.push(format!(
            "the counters hold {} where {} increments were acknowledged ({} unanswered)",
            judged.total, judged.acknowledged, judged.unknown
        ));
    }
    judged
}
