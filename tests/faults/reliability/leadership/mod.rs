//! Leader election on one lock key, recorded for the history checker. This file holds
//! what a run records (`Act`, `Answer`, `Event`, where events go: `Sink`) and the
//! client that sends each command and records it; the candidates and observers are in
//! [`roles`], the candidate processes and their event lines in [`child`], and the
//! judging of a history in [`checks`].
//!
//! Candidates campaign with `LOCK.ACQUIRE election ttl BLOCK t VALUE c<id>.<n>`, and
//! while they lead they do their leader work through `LOCK.FENCED election:mark fence
//! RPUSH election:log …` (so a deposed leader's late work is refused by the mark, and
//! the log on the server shows the order the work was admitted in), refresh their lease,
//! proclaim now and then (`LOCK.PROCLAIM election token c<id>.<n>.p<m>`) and resign.
//! A leader believes it leads only until `ttl` after it *sent* the grant or its last
//! confirmed refresh, by its own monotonic clock. Between that check and its write it
//! "computes" for a while: a process frozen there (SIGSTOP, a GC pause) writes late,
//! with its old fence, and must be refused. Observers loop `LOCK.OBSERVE election fence
//! value BLOCK t`, each with what it last saw.
//!
//! Every command is an `Event`: what was asked, when it was sent and answered (wall-clock
//! µs, the server's clock), and what came back. The same events travel from candidate
//! processes (`child_main`, run as a child of the test binary) as lines on their stdout
//! (`encode` / `decode`): a process killed with SIGKILL leaves its last command sent and
//! unanswered, which the parent records as unknown.
//!
//! `check` judges a history: the campaigns, refreshes and resignations become the
//! suite's own `Op`s, judged by `checker` as any holding is (what the server granted and
//! when the lease could have ended, not what a paused leader believed): fences increase,
//! no two leaderships certainly live at once, no refresh revives a lapsed lease. On top:
//! no fenced work with an older fence admitted after a newer one, every observed
//! `[fence, value]` one the server really had at some moment of the observation (not a
//! leader already succeeded when it was asked, not an older value of a proclaimed leader,
//! not "free" while a leadership certainly lasted), no observer answered without a change
//! or twice with the same leader state, every long leadership seen by every observer
//! live at the time; `final_states` and `log_in_order` complete it.

mod checks;
mod child;
mod roles;

pub use checks::*;
pub use child::*;
pub use roles::*;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{ErrorKind, Value};

use super::history::now_us;
use super::target::{Link, Target};

/// The election's lock key, the fence mark of the leader's work, and its log.
pub const KEY: &str = "election";
pub const MARK: &str = "election:mark";
pub const LOG: &str = "election:log";

/// What was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// `LOCK.ACQUIRE election ttl BLOCK block VALUE value`.
    Campaign {
        ttl_ms: i64,
        block_ms: i64,
        value: String,
    },
    /// `LOCK.REFRESH election token ttl`.
    Refresh { token: String, ttl_ms: i64 },
    /// `LOCK.PROCLAIM election token value`.
    Proclaim { token: String, value: String },
    /// `LOCK.FENCED election:mark fence RPUSH election:log entry`.
    Work { fence: i64, entry: String },
    /// `LOCK.RELEASE election token`.
    Resign { token: String },
    /// `LOCK.OBSERVE election fence value BLOCK block`.
    Observe {
        fence: i64,
        value: String,
        block_ms: i64,
    },
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Granted {
        token: String,
        fence: i64,
    },
    /// A campaign's or an observation's timeout.
    Nil,
    /// The 1 / 0 of a refresh, proclaim or resignation.
    Int(i64),
    /// Fenced work the mark let through.
    Admitted,
    /// Fenced work the mark refused (`STALE …`).
    Stale(String),
    Observed {
        fence: i64,
        value: Option<String>,
    },
    /// An error reply: nothing happened.
    Failed(String),
    /// No reply: sent, then the connection broke (or the process died).
    Unknown(String),
}

#[derive(Debug, Clone)]
pub struct Event {
    pub client: usize,
    pub act: Act,
    pub invoked_us: i64,
    pub completed_us: i64,
    pub answer: Answer,
    /// Which server generation answered (bumped at every failover).
    pub node: usize,
    /// False when the answer was positive but `WAIT 1` did not confirm a replica has it.
    pub confirmed: bool,
}

impl Event {
    /// The `[fence, value]` an observation answered, nil read as "".
    pub fn observed(&self) -> Option<(i64, &str)> {
        match &self.answer {
            Answer::Observed { fence, value } => Some((*fence, value.as_deref().unwrap_or(""))),
            _ => None,
        }
    }

    fn is_observe(&self) -> bool {
        matches!(self.act, Act::Observe { .. })
    }

    /// A grant a replica confirmed (where confirmation was asked).
    fn acked_grant(&self) -> Option<(i64, &str)> {
        match (&self.act, &self.answer, self.confirmed) {
            (Act::Campaign { .. }, Answer::Granted { fence, token }, true) => {
                Some((*fence, token.as_str()))
            }
            _ => None,
        }
    }
}

/// Where events go: a shared history in the test process, or stdout in a candidate
/// process (which also announces each command before sending it).
pub trait Sink {
    fn invoking(&mut self, _client: usize, _act: &Act, _at_us: i64) {}
    fn record(&mut self, event: Event);
}

/// The test process's history, shared by its threads.
#[derive(Clone, Default)]
pub struct Shared(pub Arc<Mutex<Vec<Event>>>);

impl Shared {
    pub fn snapshot(&self) -> Vec<Event> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn extend(&self, events: Vec<Event>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(events);
    }
}

impl Sink for Shared {
    fn record(&mut self, event: Event) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }
}

/// One connection's client: sends to the target's current server, records each
/// command; a broken connection makes the answer unknown and is replaced next time.
pub struct Client {
    pub id: usize,
    target: Arc<Target>,
    con: Link,
    read_timeout: Duration,
    confirm: bool,
}

impl Client {
    pub fn new(id: usize, target: Arc<Target>, read_timeout: Duration, confirm: bool) -> Self {
        Client {
            id,
            target,
            con: None,
            read_timeout,
            confirm,
        }
    }

    pub fn stopping(&self) -> bool {
        self.target.stopping()
    }

    /// Sends `act` and records it; `None` when it was not sent (stopping, or no server
    /// accepts connections right now).
    pub fn send(&mut self, act: Act, sink: &mut dyn Sink) -> Option<Event> {
        if !self.target.pass() {
            return None;
        }
        let node = self.connect()?;
        let (con, _, _) = self.con.as_mut()?;
        let command = command_for(&act);
        let invoked_us = now_us();
        sink.invoking(self.id, &act, invoked_us);
        let answer = classify(&act, command.query::<Value>(con));
        let positive = matches!(
            answer,
            Answer::Granted { .. } | Answer::Int(1) | Answer::Admitted
        );
        let mut confirmed = true;
        let mut broken = matches!(answer, Answer::Unknown(_));
        if self.confirm && positive {
            let acked = redis::cmd("WAIT").arg(1).arg(250).query::<i64>(con);
            confirmed = acked.as_ref().is_ok_and(|n| *n >= 1);
            broken |= acked.is_err_and(|e| !matches!(e.kind(), ErrorKind::Server(_)));
        }
        broken |= matches!(&answer, Answer::Failed(text)
            if text.contains("READONLY") || text.contains("UNBLOCKED") || text.contains("LOADING"));
        if broken {
            self.con = None;
        }
        let event = Event {
            client: self.id,
            act,
            invoked_us,
            completed_us: now_us(),
            answer,
            node,
            confirmed,
        };
        sink.record(event.clone());
        Some(event)
    }

    fn connect(&mut self) -> Option<usize> {
        self.target.connect(&mut self.con, self.read_timeout)
    }
}

fn command_for(act: &Act) -> redis::Cmd {
    let mut c;
    match act {
        Act::Campaign {
            ttl_ms,
            block_ms,
            value,
        } => {
            c = redis::cmd("LOCK.ACQUIRE");
            c.arg(KEY)
                .arg(*ttl_ms)
                .arg("BLOCK")
                .arg(*block_ms)
                .arg("VALUE")
                .arg(value);
        }
        Act::Refresh { token, ttl_ms } => {
            c = redis::cmd("LOCK.REFRESH");
            c.arg(KEY).arg(token).arg(*ttl_ms);
        }
        Act::Proclaim { token, value } => {
            c = redis::cmd("LOCK.PROCLAIM");
            c.arg(KEY).arg(token).arg(value);
        }
        Act::Work { fence, entry } => {
            c = redis::cmd("LOCK.FENCED");
            c.arg(MARK).arg(*fence).arg("RPUSH").arg(LOG).arg(entry);
        }
        Act::Resign { token } => {
            c = redis::cmd("LOCK.RELEASE");
            c.arg(KEY).arg(token);
        }
        Act::Observe {
            fence,
            value,
            block_ms,
        } => {
            c = redis::cmd("LOCK.OBSERVE");
            c.arg(KEY)
                .arg(*fence)
                .arg(value)
                .arg("BLOCK")
                .arg(*block_ms);
        }
    }
    c
}

fn classify(act: &Act, reply: redis::RedisResult<Value>) -> Answer {
    let unexpected = |what: &dyn std::fmt::Debug| Answer::Failed(format!("unexpected {what:?}"));
    let bulk = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    match reply {
        Ok(Value::Nil) if matches!(act, Act::Campaign { .. } | Act::Observe { .. }) => Answer::Nil,
        Ok(Value::Int(n)) if matches!(act, Act::Work { .. }) => {
            if n > 0 {
                Answer::Admitted
            } else {
                unexpected(&n)
            }
        }
        Ok(Value::Int(n))
            if matches!(
                act,
                Act::Refresh { .. } | Act::Proclaim { .. } | Act::Resign { .. }
            ) && (n == 0 || n == 1) =>
        {
            Answer::Int(n)
        }
        Ok(Value::Array(items)) => match (act, items.as_slice()) {
            (Act::Campaign { .. }, [Value::BulkString(token), Value::Int(fence)]) => {
                Answer::Granted {
                    token: bulk(token),
                    fence: *fence,
                }
            }
            (Act::Observe { .. }, [Value::Int(fence), Value::BulkString(value)]) => {
                Answer::Observed {
                    fence: *fence,
                    value: Some(bulk(value)),
                }
            }
            (Act::Observe { .. }, [Value::Int(fence), Value::Nil]) => Answer::Observed {
                fence: *fence,
                value: None,
            },
            (_, other) => unexpected(&other),
        },
        Ok(other) => unexpected(&other),
        Err(error) if error.code() == Some("STALE") => Answer::Stale(error.to_string()),
        Err(error) if matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
            Answer::Failed(error.to_string())
        }
        Err(error) => Answer::Unknown(error.to_string()),
    }
}
