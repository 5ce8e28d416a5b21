//! One load client: sends lock commands to the current target and records each one in
//! the history with its invoke / complete times and outcome. A broken connection makes
//! the operation unknown and is replaced on the next call; an error reply is a definite
//! failure. With `confirm`, every positive answer is followed by `WAIT 1`, and only a
//! replica-confirmed answer counts as acknowledged (what a client needs across failover);
//! a session client's answered commands are confirmed whatever they answer (a release
//! answered 0 settles a holding only once the replica has everything before it too).

use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, ErrorKind, Value};

use super::history::{now_us, History, Mode, Op, Outcome, Request};
use super::target::{Link, Target};

/// How many times a command is sent, following redirects, before its answer stands.
const REDIRECTS: usize = 8;

/// A command sent outside the history, with when it was sent and answered.
pub struct Sent {
    pub reply: redis::RedisResult<Value>,
    pub invoked_us: i64,
    pub completed_us: i64,
    /// False when confirmation was asked for and `WAIT 1` did not give it.
    pub confirmed: bool,
}

pub struct LockClient {
    pub id: usize,
    target: Arc<Target>,
    history: History,
    con: Link,
    read_timeout: Duration,
    confirm: bool,
}

impl LockClient {
    pub fn new(
        id: usize,
        target: Arc<Target>,
        history: History,
        read_timeout: Duration,
        confirm: bool,
    ) -> Self {
        LockClient {
            id,
            target,
            history,
            con: None,
            read_timeout,
            confirm,
        }
    }

    /// Where this client sends its commands.
    pub fn target(&self) -> Arc<Target> {
        self.target.clone()
    }

    /// `LOCK.ACQUIRE` in `mode`; `None` when not sent. A grant a replica did not confirm
    /// is given back and reported as unknown: the caller must not rely on it.
    pub fn acquire(
        &mut self,
        key: &str,
        ttl_ms: i64,
        block_ms: Option<i64>,
        mode: Mode,
    ) -> Option<Outcome> {
        let request = Request::Acquire {
            ttl_ms,
            block_ms,
            mode,
        };
        let (outcome, confirmed) = self.run(key, request, false)?;
        if let (Outcome::Granted { token, .. }, false) = (&outcome, confirmed) {
            let token = token.clone();
            self.release(key, &token);
            return Some(Outcome::Unknown("grant not confirmed by a replica".into()));
        }
        Some(outcome)
    }

    /// `LOCK.ACQUIREALL` of `keys` in `mode`, recorded as one op per key; each key's
    /// outcome, or `None` when not sent. A grant a replica did not confirm is given back
    /// key by key and reported as unknown, as `acquire` does.
    pub fn acquire_all(
        &mut self,
        keys: &[String],
        ttl_ms: i64,
        block_ms: Option<i64>,
        mode: Mode,
    ) -> Option<Vec<Outcome>> {
        let request = Request::AcquireAll {
            keys: keys.to_vec(),
            ttl_ms,
            block_ms,
            mode,
        };
        let (outcomes, confirmed) = self.run_for(keys, request, false)?;
        if let (Some(Outcome::Granted { token, .. }), false) = (outcomes.first(), confirmed) {
            let token = token.clone();
            for key in keys {
                self.release(key, &token);
            }
            let unknown = Outcome::Unknown("grant not confirmed by a replica".into());
            return Some(vec![unknown; keys.len()]);
        }
        Some(outcomes)
    }

    /// `LOCK.REFRESH`; `Some(answer)` when acknowledged.
    pub fn refresh(&mut self, key: &str, token: &str, ttl_ms: i64) -> Option<bool> {
        let request = Request::Refresh {
            token: token.into(),
            ttl_ms,
        };
        match self.run(key, request, false)? {
            (Outcome::Done(answer), true) => Some(answer),
            _ => None,
        }
    }

    /// `LOCK.RELEASE`; `Some(answer)` when acknowledged.
    pub fn release(&mut self, key: &str, token: &str) -> Option<bool> {
        let request = Request::Release {
            token: token.into(),
        };
        match self.run(key, request, false)? {
            (Outcome::Done(answer), true) => Some(answer),
            _ => None,
        }
    }

    /// A session client's command (`SessionAcquire`, `KeepAlive`, `Close`, or the
    /// `Release` of a session's token): sent and recorded like the others, confirmed by
    /// `WAIT 1` (with `confirm`) whatever it answered, busy aside. The outcome and whether
    /// it was confirmed, as they came: the session client judges them itself.
    pub fn session_command(&mut self, key: &str, request: Request) -> Option<(Outcome, bool)> {
        self.run(key, request, true)
    }

    /// Sends one command and records it. `None` when it was never sent (the run is
    /// stopping, or no server accepts connections right now). With `confirm`, a positive
    /// answer (with `confirm_any`, any grant, 1 / 0 or count) is followed by `WAIT 1`.
    fn run(&mut self, key: &str, request: Request, confirm_any: bool) -> Option<(Outcome, bool)> {
        let (mut outcomes, confirmed) = self.run_for(&[key.to_string()], request, confirm_any)?;
        Some((outcomes.pop()?, confirmed))
    }

    /// `run` for a command about `keys` (one, or those of a `LOCK.ACQUIREALL`): recorded
    /// as one op per key, each with its own outcome (a grant's fence for that key).
    fn run_for(
        &mut self,
        keys: &[String],
        request: Request,
        confirm_any: bool,
    ) -> Option<(Vec<Outcome>, bool)> {
        if !self.target.pass() {
            return None;
        }
        let node = self.connect()?;
        let command = command_for(keys.first()?, &request);
        let confirm = self.confirm;
        let invoked_us = now_us();
        let counts = matches!(request, Request::KeepAlive { .. } | Request::Close { .. });
        let reply = self.send(&command);
        let outcomes = match request {
            Request::AcquireAll { .. } => classify_all(reply, keys.len()),
            _ => vec![classify(reply, counts)],
        };
        let outcome = outcomes.first()?.clone();
        let positive = matches!(outcome, Outcome::Granted { .. } | Outcome::Done(true));
        let answered = matches!(
            outcome,
            Outcome::Granted { .. } | Outcome::Done(_) | Outcome::Count(_)
        );
        let mut confirmed = true;
        let mut broken = matches!(outcome, Outcome::Unknown(_));
        if confirm && (positive || (confirm_any && answered)) {
            let (replicated, lost_link) = self
                .con
                .as_mut()
                .map_or((false, true), |(con, _, _)| wait_for_replica(con));
            confirmed = replicated;
            broken |= lost_link;
        }
        // A demoted primary refuses writes and unblocks waiters: find the new one.
        broken |= matches!(&outcome, Outcome::Failed(text)
            if text.contains("READONLY") || text.contains("UNBLOCKED"));
        if broken {
            self.con = None;
        }
        let completed_us = now_us();
        for (key, outcome) in keys.iter().zip(&outcomes) {
            self.history.record(Op {
                client: self.id,
                key: key.clone(),
                request: request.clone(),
                invoked_us,
                completed_us,
                outcome: outcome.clone(),
                node,
                confirmed,
            });
        }
        Some((outcomes, confirmed))
    }

    /// Sends `command` on this client's connection, outside the recorded history (the
    /// guarded counter's reads and writes); `None` when not sent.
    pub fn query(&mut self, command: &redis::Cmd) -> Option<Sent> {
        if !self.target.pass() {
            return None;
        }
        self.connect()?;
        let (con, _, _) = self.con.as_mut()?;
        // Taken once connected: the gate may have held the command back until then.
        let invoked_us = now_us();
        let reply = command.query::<Value>(con);
        if reply.as_ref().is_err_and(|error| {
            !matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
        }) {
            self.con = None;
        }
        Some(Sent {
            reply,
            invoked_us,
            completed_us: now_us(),
            confirmed: true,
        })
    }

    /// Like `query`, for a write: with `confirm`, an answered write counts as confirmed
    /// only once `WAIT 1` says a replica has it, as grants do.
    pub fn write(&mut self, command: &redis::Cmd) -> Option<Sent> {
        let mut sent = self.query(command)?;
        if self.confirm && sent.reply.is_ok() {
            let (replicated, lost_link) = self
                .con
                .as_mut()
                .map_or((false, true), |(con, _, _)| wait_for_replica(con));
            sent.confirmed = replicated;
            if lost_link {
                self.con = None;
            }
            sent.completed_us = now_us();
        }
        Some(sent)
    }

    /// Sends `command` on this client's connection. On a cluster target, a command
    /// answered `MOVED` or `ASK` (not run) goes again to the node named, and one answered
    /// `TRYAGAIN` (a wait ended as its key's slot left) again after a moment, as cluster
    /// clients do, a few times at most; the last answer is the command's.
    fn send(&mut self, command: &redis::Cmd) -> redis::RedisResult<Value> {
        let mut asking = false;
        let mut tries = 0;
        loop {
            tries += 1;
            let Some((con, _, _)) = self.con.as_mut() else {
                let lost = std::io::Error::other("no connection after a redirect");
                return Err(lost.into());
            };
            if asking {
                let _: redis::RedisResult<Value> = redis::cmd("ASKING").query(con);
            }
            let reply = command.query::<Value>(con);
            let Err(error) = &reply else {
                return reply;
            };
            if !self.target.is_cluster() || tries >= REDIRECTS {
                return reply;
            }
            match error.code() {
                Some(code @ ("MOVED" | "ASK")) => {
                    asking = code == "ASK";
                    let port = error
                        .redirect_node()
                        .and_then(|(address, _)| address.rsplit(':').next()?.parse().ok());
                    let Some(port) = port else {
                        return reply;
                    };
                    if !self.target.redirect(&mut self.con, port, self.read_timeout) {
                        return reply;
                    }
                }
                Some("TRYAGAIN") => {
                    asking = false;
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => return reply,
            }
        }
    }

    /// Connects to the current target if not connected to it; returns its generation.
    fn connect(&mut self) -> Option<usize> {
        self.target.connect(&mut self.con, self.read_timeout)
    }
}

/// `WAIT 1` after an answer: (a replica has it, the connection broke). Only a
/// replica-confirmed answer survives the primary's death.
fn wait_for_replica(con: &mut Connection) -> (bool, bool) {
    let acked = redis::cmd("WAIT").arg(1).arg(250).query::<i64>(con);
    let confirmed = acked.as_ref().is_ok_and(|replicas| *replicas >= 1);
    (
        confirmed,
        acked.is_err_and(|error| !matches!(error.kind(), ErrorKind::Server(_))),
    )
}

fn command_for(key: &str, request: &Request) -> redis::Cmd {
    match request {
        Request::Acquire {
            ttl_ms,
            block_ms,
            mode,
        } => {
            let mut c = redis::cmd("LOCK.ACQUIRE");
            c.arg(key).arg(*ttl_ms);
            if let Some(block) = block_ms {
                c.arg("BLOCK").arg(*block);
            }
            c.arg(mode.args());
            c
        }
        Request::AcquireAll {
            keys,
            ttl_ms,
            block_ms,
            mode,
        } => {
            let mut c = redis::cmd("LOCK.ACQUIREALL");
            c.arg(keys.len()).arg(keys).arg(*ttl_ms);
            if let Some(block) = block_ms {
                c.arg("BLOCK").arg(*block);
            }
            c.arg(mode.args());
            c
        }
        Request::Refresh { token, ttl_ms } => {
            let mut c = redis::cmd("LOCK.REFRESH");
            c.arg(key).arg(token).arg(*ttl_ms);
            c
        }
        Request::Release { token } => {
            let mut c = redis::cmd("LOCK.RELEASE");
            c.arg(key).arg(token);
            c
        }
        Request::SessionAcquire {
            session,
            token,
            ttl_ms,
            block_ms,
            mode,
            lock_delay_ms,
        } => {
            let mut c = redis::cmd("LOCK.ACQUIRE");
            c.arg(key)
                .arg(*ttl_ms)
                .arg("TOKEN")
                .arg(token)
                .arg("SESSION")
                .arg(session);
            if let Some(block) = block_ms {
                c.arg("BLOCK").arg(*block);
            }
            c.arg(mode.args());
            if *lock_delay_ms > 0 {
                c.arg("LOCKDELAY").arg(*lock_delay_ms);
            }
            c
        }
        Request::KeepAlive { session, ttl_ms } => {
            let mut c = redis::cmd("LOCK.KEEPALIVE");
            c.arg(session).arg(*ttl_ms);
            c
        }
        Request::Close { session } => {
            let mut c = redis::cmd("LOCK.CLOSE");
            c.arg(session);
            c
        }
    }
}

/// Maps a `LOCK.ACQUIREALL` reply to each of its `n` keys' outcomes: a grant
/// `[token, [fences]]` gives every key the token and its own fence; anything else is
/// the same outcome for all.
fn classify_all(reply: redis::RedisResult<Value>, n: usize) -> Vec<Outcome> {
    if let Ok(Value::Array(items)) = &reply {
        if let [Value::BulkString(token), Value::Array(fences)] = items.as_slice() {
            let token = String::from_utf8_lossy(token).into_owned();
            let fences: Option<Vec<i64>> = fences
                .iter()
                .map(|fence| match fence {
                    Value::Int(fence) => Some(*fence),
                    _ => None,
                })
                .collect();
            return match fences.filter(|fences| fences.len() == n) {
                Some(fences) => fences
                    .into_iter()
                    .map(|fence| Outcome::Granted {
                        token: token.clone(),
                        fence,
                    })
                    .collect(),
                None => vec![Outcome::Failed(format!("unexpected grant reply {items:?}")); n],
            };
        }
    }
    vec![classify(reply, false); n]
}

/// Maps a reply to an outcome: an error reply is definite, a transport error is not. An
/// integer is a count when `counts` (keepalive, close), else the 1 / 0 of a refresh or
/// release.
fn classify(reply: redis::RedisResult<Value>, counts: bool) -> Outcome {
    match reply {
        Ok(Value::Nil) => Outcome::Busy,
        Ok(Value::Int(n)) if counts => Outcome::Count(n),
        Ok(Value::Int(n)) => Outcome::Done(n == 1),
        Ok(Value::Array(items)) => match items.as_slice() {
            [Value::BulkString(token), Value::Int(fence)] => Outcome::Granted {
                token: String::from_utf8_lossy(token).into_owned(),
                fence: *fence,
            },
            other => Outcome::Failed(format!("unexpected grant reply {other:?}")),
        },
        Ok(other) => Outcome::Failed(format!("unexpected reply {other:?}")),
        Err(error) if matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
            Outcome::Failed(error.to_string())
        }
        Err(error) => Outcome::Unknown(error.to_string()),
    }
}
