//! The operation history: every lock command a client sent, with when it was invoked,
//! when its outcome was known, and that outcome: granted / busy / 1 / 0 / a count, a
//! definite failure (an error reply: nothing changed), or unknown (the connection broke
//! or timed out after sending: it may or may not have taken effect). Session clients
//! (`session`) add their acquires in a session, their keepalives and their closes: the
//! session commands name no key, so their ops carry an empty one.
//!
//! Times are Unix microseconds from the wall clock, the same clock redis-server uses for
//! lease deadlines, so history times compare directly with `PEXPIRETIME`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock Unix time in microseconds.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// How an acquire asks to hold: alone, shared with other `Shared` holders, or as one of
/// at most `n` holders of a semaphore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    Exclusive,
    Shared,
    Limit(i64),
}

impl Mode {
    /// How many holders, this one included, may hold the key while this one does.
    pub fn admits(self) -> usize {
        match self {
            Mode::Exclusive => 1,
            Mode::Shared => usize::MAX,
            Mode::Limit(n) => usize::try_from(n).unwrap_or(0),
        }
    }

    /// The `LOCK.ACQUIRE` options that ask for it.
    pub fn args(self) -> Vec<String> {
        match self {
            Mode::Exclusive => Vec::new(),
            Mode::Shared => vec!["SHARED".into()],
            Mode::Limit(n) => vec!["LIMIT".into(), n.to_string()],
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Exclusive => f.write_str("exclusive"),
            Mode::Shared => f.write_str("shared"),
            Mode::Limit(n) => write!(f, "limit {n}"),
        }
    }
}

/// What was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Acquire {
        ttl_ms: i64,
        block_ms: Option<i64>,
        mode: Mode,
    },
    /// `LOCK.ACQUIREALL n keys… ttl [BLOCK ms] [mode]`: every key or none, one token for
    /// all. Recorded as one op per key (`Op::key`), each with that key's fence.
    AcquireAll {
        keys: Vec<String>,
        ttl_ms: i64,
        block_ms: Option<i64>,
        mode: Mode,
    },
    Refresh {
        token: String,
        ttl_ms: i64,
    },
    Release {
        token: String,
    },
    /// `LOCK.ACQUIRE key ttl TOKEN token SESSION session [BLOCK ms] [mode] [LOCKDELAY ms]`:
    /// a holding of `session`, kept alive by the session's keepalives (never refreshed).
    /// The token is the client's own, so an acquire whose reply was lost can still be
    /// released.
    SessionAcquire {
        session: String,
        token: String,
        ttl_ms: i64,
        block_ms: Option<i64>,
        mode: Mode,
        lock_delay_ms: i64,
    },
    /// `LOCK.KEEPALIVE session ttl`.
    KeepAlive {
        session: String,
        ttl_ms: i64,
    },
    /// `LOCK.CLOSE session`.
    Close {
        session: String,
    },
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Granted {
        token: String,
        fence: i64,
    },
    /// Nil from an acquire: busy, or a BLOCK that timed out.
    Busy,
    /// The 1 / 0 of a refresh or release.
    Done(bool),
    /// The integer of a keepalive or a close: how many holdings it kept or released.
    Count(i64),
    /// An error reply: the command was refused and changed nothing.
    Failed(String),
    /// No reply: sent, then the connection broke or timed out.
    Unknown(String),
}

/// One operation of one client on one key.
#[derive(Debug, Clone)]
pub struct Op {
    pub client: usize,
    pub key: String,
    pub request: Request,
    pub invoked_us: i64,
    pub completed_us: i64,
    pub outcome: Outcome,
    /// Which server generation answered (bumped at every failover).
    pub node: usize,
    /// False when the reply came but `WAIT` could not confirm a replica has it: then it
    /// counts as acknowledged only for what the old node issued, not for durability.
    pub confirmed: bool,
}

impl Op {
    /// The fence of an acknowledged grant.
    pub fn fence(&self) -> Option<i64> {
        match &self.outcome {
            Outcome::Granted { fence, .. } => Some(*fence),
            _ => None,
        }
    }

    /// The token this op was about: granted, asked for in a session (whatever came
    /// back), refreshed or released.
    pub fn token(&self) -> Option<&str> {
        match (&self.request, &self.outcome) {
            (_, Outcome::Granted { token, .. }) => Some(token),
            (
                Request::Refresh { token, .. }
                | Request::Release { token }
                | Request::SessionAcquire { token, .. },
                _,
            ) => Some(token),
            _ => None,
        }
    }

    /// The session an acquire, keepalive or close named.
    pub fn session(&self) -> Option<&str> {
        match &self.request {
            Request::SessionAcquire { session, .. }
            | Request::KeepAlive { session, .. }
            | Request::Close { session } => Some(session),
            _ => None,
        }
    }

    /// The lock-delay an acquire asked for (0: none).
    pub fn lock_delay_ms(&self) -> i64 {
        match self.request {
            Request::SessionAcquire { lock_delay_ms, .. } => lock_delay_ms,
            _ => 0,
        }
    }

    /// The count a keepalive or close answered.
    pub fn count(&self) -> Option<i64> {
        match self.outcome {
            Outcome::Count(n) => Some(n),
            _ => None,
        }
    }

    /// Acknowledged with a positive answer (grant, or refresh/release returning 1),
    /// and confirmed where confirmation was asked for.
    pub fn acked_yes(&self) -> bool {
        self.confirmed && matches!(self.outcome, Outcome::Granted { .. } | Outcome::Done(true))
    }

    /// The effect may or may not have happened.
    pub fn maybe(&self) -> bool {
        matches!(self.outcome, Outcome::Unknown(_))
            || (!self.confirmed
                && matches!(self.outcome, Outcome::Granted { .. } | Outcome::Done(true)))
    }

    /// The mode an acquire asked for.
    pub fn mode(&self) -> Option<Mode> {
        match self.request {
            Request::Acquire { mode, .. }
            | Request::AcquireAll { mode, .. }
            | Request::SessionAcquire { mode, .. } => Some(mode),
            _ => None,
        }
    }

    pub fn is_refresh(&self) -> bool {
        matches!(self.request, Request::Refresh { .. })
    }

    pub fn is_release(&self) -> bool {
        matches!(self.request, Request::Release { .. })
    }

    pub fn ttl_ms(&self) -> Option<i64> {
        match self.request {
            Request::Acquire { ttl_ms, .. }
            | Request::AcquireAll { ttl_ms, .. }
            | Request::Refresh { ttl_ms, .. }
            | Request::SessionAcquire { ttl_ms, .. }
            | Request::KeepAlive { ttl_ms, .. } => Some(ttl_ms),
            Request::Release { .. } | Request::Close { .. } => None,
        }
    }
}

/// The shared, append-only history of a run.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Vec<Op>>>);

impl History {
    pub fn record(&self, op: Op) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(op);
    }

    /// A copy of everything recorded so far.
    pub fn snapshot(&self) -> Vec<Op> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
