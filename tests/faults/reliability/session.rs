//! The session variant of the load. Each session client is one process's worth of a lock
//! user: a worker thread that takes a few keys at a time in its session
//! (`LOCK.ACQUIRE … TOKEN t SESSION s [LOCKDELAY d]`; all of them or none: a busy one
//! gives back the others), holds them, often for longer than a lease, touches the
//! protected resources and ends the hold with `LOCK.RELEASE`s or one `LOCK.CLOSE`; and a
//! heartbeat thread that keeps every holding of the session alive
//! with `LOCK.KEEPALIVE s ttl` every third of the lease, nothing else. Both share one
//! connection and send one command at a time (a BLOCK is kept to a quarter of the lease
//! so the heartbeat is not held back past it), which is what lets a keepalive's count
//! prove what it kept (`belief`).
//!
//! The client keeps the books `belief` derives from the history, by its own monotonic
//! clock: a holding is held until `ttl` after the acquire or the latest keepalive sent
//! and confirmed covering it; a keepalive answering fewer than the holdings the session
//! may have (believed, plus given up but not settled) loses them all; those given up are
//! released before the next keepalive, so that they stop counting.
//!
//! A heartbeat may *stall* (a GC pause, a frozen VM): it sleeps past the lease and the
//! worker is frozen with it (it sleeps until the stall ends at its next step), then both
//! go on as a process resumed from SIGSTOP would: the worker writes what it read before
//! the pause, never knowing; the fence refuses it if someone newer wrote meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::client::LockClient;
use super::history::{Mode, Outcome, Request};
use super::resource::Resource;
use super::target::Target;
use super::workload::LoadSpec;

/// How the session clients of a load behave (`clients: 0`: none).
#[derive(Clone, Debug)]
pub struct SessionSpec {
    pub clients: usize,
    /// Each client's session lease (acquires and keepalives alike), inclusive, ms.
    pub ttl_ms: (i64, i64),
    /// How many keys a hold takes, at most (at least one).
    pub keys_per_hold: usize,
    /// How long a hold lasts, inclusive, ms: mostly several leases.
    pub hold_ms: (i64, i64),
    /// Share of acquires that BLOCK (for at most a quarter of the lease, within the
    /// load's `block_ms`).
    pub block_fraction: f64,
    /// Share of holds ended by `LOCK.CLOSE` rather than a release per key.
    pub close_fraction: f64,
    /// Share of acquires with a lock-delay, and its length (inclusive, ms).
    pub lock_delay_fraction: f64,
    pub lock_delay_ms: (i64, i64),
    /// Share of heartbeats that stall, and by how much past the lease (inclusive, ms).
    pub stall_fraction: f64,
    pub stall_ms: (i64, i64),
}

impl SessionSpec {
    /// No session clients.
    pub fn none() -> Self {
        SessionSpec {
            clients: 0,
            ..Self::standard(0)
        }
    }

    /// `clients` session clients, leases of 300–700 ms, holds of up to three keys for
    /// up to a few leases, 60% of acquires BLOCK, a third with a lock-delay of 100–300
    /// ms, no stalls.
    pub fn standard(clients: usize) -> Self {
        SessionSpec {
            clients,
            ttl_ms: (300, 700),
            keys_per_hold: 3,
            hold_ms: (0, 1_000),
            block_fraction: 0.6,
            close_fraction: 0.3,
            lock_delay_fraction: 0.35,
            lock_delay_ms: (100, 300),
            stall_fraction: 0.0,
            stall_ms: (20, 300),
        }
    }

    pub fn describe(&self) -> String {
        let mut text = format!(
            "{} session clients (ttl {}-{} ms, up to {} keys held {}-{} ms, {:.0}% BLOCK, {:.0}% closed, {:.0}% with lock-delay {}-{} ms",
            self.clients,
            self.ttl_ms.0,
            self.ttl_ms.1,
            self.keys_per_hold,
            self.hold_ms.0,
            self.hold_ms.1,
            self.block_fraction * 100.0,
            self.close_fraction * 100.0,
            self.lock_delay_fraction * 100.0,
            self.lock_delay_ms.0,
            self.lock_delay_ms.1
        );
        if self.stall_fraction > 0.0 {
            text += &format!(
                ", {:.0}% of heartbeats stalling {}-{} ms past the lease",
                self.stall_fraction * 100.0,
                self.stall_ms.0,
                self.stall_ms.1
            );
        }
        text + ")"
    }
}

/// What the session clients counted themselves.
#[derive(Default, Debug)]
pub struct SessionFigures {
    /// Heartbeat stalls past the lease.
    pub stalls: AtomicU64,
    /// Writes of session holders the fenced resource refused.
    pub refused: AtomicU64,
}

impl SessionFigures {
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// A holding the client believes it has.
struct Held {
    key: String,
    token: String,
    deadline: Instant,
}

/// The books and the connection of one session client, behind one lock.
struct Books {
    client: LockClient,
    session: String,
    ttl_ms: i64,
    held: Vec<Held>,
    /// Given up or never known (reply lost, unconfirmed): may still be on the server
    /// until a release of it is answered. (key, token)
    unsettled: Vec<(String, String)>,
}

/// How an acquire came out, for the worker.
enum Got {
    Granted(i64),
    Busy,
    Nothing,
}

impl Books {
    fn lease(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.ttl_ms).unwrap_or(0))
    }

    /// Holdings whose deadline passed are given up.
    fn expire(&mut self) {
        let now = Instant::now();
        let (live, gone): (Vec<Held>, Vec<Held>) =
            self.held.drain(..).partition(|h| h.deadline > now);
        self.held = live;
        self.unsettled
            .extend(gone.into_iter().map(|h| (h.key, h.token)));
    }

    /// Releases what was given up; what is answered is settled.
    fn settle(&mut self) {
        let unsettled = std::mem::take(&mut self.unsettled);
        for (key, token) in unsettled {
            if !self.release_settles(&key, &token) {
                self.unsettled.push((key, token));
            }
        }
    }

    /// Sends the release; true when it was answered (and confirmed).
    fn release_settles(&mut self, key: &str, token: &str) -> bool {
        let request = Request::Release {
            token: token.into(),
        };
        matches!(
            self.client.session_command(key, request),
            Some((Outcome::Done(_), true))
        )
    }

    fn acquire(
        &mut self,
        key: &str,
        token: &str,
        mode: Mode,
        block_ms: Option<i64>,
        lock_delay_ms: i64,
    ) -> Got {
        let request = Request::SessionAcquire {
            session: self.session.clone(),
            token: token.into(),
            ttl_ms: self.ttl_ms,
            block_ms,
            mode,
            lock_delay_ms,
        };
        let sent = Instant::now();
        match self.client.session_command(key, request) {
            Some((Outcome::Granted { fence, .. }, true)) => {
                self.held.push(Held {
                    key: key.into(),
                    token: token.into(),
                    deadline: sent + self.lease(),
                });
                Got::Granted(fence)
            }
            Some((Outcome::Granted { .. } | Outcome::Unknown(_), _)) => {
                self.unsettled.push((key.into(), token.into()));
                Got::Nothing
            }
            Some((Outcome::Busy, _)) => Got::Busy,
            _ => Got::Nothing,
        }
    }

    /// The heartbeat's beat: settle what was given up, then keep the session alive.
    fn keep_alive(&mut self) {
        self.settle();
        self.expire();
        let may_have = self.held.len() + self.unsettled.len();
        if may_have == 0 {
            return;
        }
        let request = Request::KeepAlive {
            session: self.session.clone(),
            ttl_ms: self.ttl_ms,
        };
        let sent = Instant::now();
        match self.client.session_command("", request) {
            // Unconfirmed by a replica: kept on this server, perhaps not on the next.
            Some((Outcome::Count(n), false)) if n >= may_have as i64 => {}
            Some((Outcome::Count(n), true)) if n >= may_have as i64 => {
                let deadline = sent + self.lease();
                for held in &mut self.held {
                    held.deadline = held.deadline.max(deadline);
                }
            }
            Some((Outcome::Count(_), _)) => {
                // Something the session may have is gone: all of it is lost from the send.
                let lost = self.held.drain(..).map(|h| (h.key, h.token));
                self.unsettled.extend(lost);
                self.settle();
            }
            _ => {}
        }
    }

    /// Ends the hold of `token` on `key` with a release.
    fn release(&mut self, key: &str, token: &str) {
        let believed = self.held.iter().position(|h| h.token == token);
        let unsettled = self.unsettled.iter().position(|(_, t)| t == token);
        if believed.is_none() && unsettled.is_none() {
            return;
        }
        if let Some(at) = believed {
            self.held.remove(at);
        }
        if let Some(at) = unsettled {
            self.unsettled.remove(at);
        }
        if !self.release_settles(key, token) {
            self.unsettled.push((key.into(), token.into()));
        }
    }

    /// Ends every holding of the session with one close.
    fn close(&mut self) {
        let request = Request::Close {
            session: self.session.clone(),
        };
        let given_up = self.held.drain(..).map(|h| (h.key, h.token));
        self.unsettled.extend(given_up);
        if let Some((Outcome::Count(_), true)) = self.client.session_command("", request) {
            self.unsettled.clear();
        }
    }
}

/// One session client: its books, and a freeze both of its threads honour.
struct SessionClient {
    books: Mutex<Books>,
    frozen_until: Mutex<Option<Instant>>,
    target: Arc<Target>,
}

impl SessionClient {
    fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits out a stall of the heartbeat (the whole process is frozen).
    fn thaw(&self) {
        loop {
            let until = *self
                .frozen_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match until {
                Some(until) if until > Instant::now() && !self.target.stopping() => {
                    thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
                }
                _ => return,
            }
        }
    }

    fn freeze(&self, until: Instant) {
        *self
            .frozen_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Sleeps `ms`, then as long as the client is frozen; returns early once stopping.
    fn pause_ms(&self, ms: i64) {
        let until = Instant::now() + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        while Instant::now() < until && !self.target.stopping() {
            thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
        }
        self.thaw();
    }
}

/// Starts one session client (its worker and its heartbeat); returns both threads.
pub fn start(
    id: usize,
    spec: &LoadSpec,
    client: LockClient,
    resources: (Arc<Resource>, Arc<Resource>),
    figures: Arc<SessionFigures>,
) -> Vec<thread::JoinHandle<()>> {
    let mut rng = StdRng::seed_from_u64(spec.seed ^ 0x5e55_1011 ^ (id as u64).wrapping_mul(0x9e37));
    let sessions = &spec.sessions;
    let ttl_ms = rng.gen_range(sessions.ttl_ms.0..=sessions.ttl_ms.1);
    let target = client.target();
    let shared = Arc::new(SessionClient {
        books: Mutex::new(Books {
            client,
            session: format!("s{id}-{:016x}", rng.gen::<u64>()),
            ttl_ms,
            held: Vec::new(),
            unsettled: Vec::new(),
        }),
        frozen_until: Mutex::new(None),
        target,
    });
    let heartbeat = Heartbeat {
        client: shared.clone(),
        spec: sessions.clone(),
        ttl_ms,
        rng: StdRng::seed_from_u64(rng.gen()),
        figures: figures.clone(),
    };
    let worker = Worker {
        client: shared,
        spec: spec.clone(),
        ttl_ms,
        rng,
        fenced: resources.0,
        control: resources.1,
        figures,
    };
    vec![
        thread::spawn(move || heartbeat.run()),
        thread::spawn(move || worker.run()),
    ]
}

struct Heartbeat {
    client: Arc<SessionClient>,
    spec: SessionSpec,
    ttl_ms: i64,
    rng: StdRng,
    figures: Arc<SessionFigures>,
}

impl Heartbeat {
    fn run(mut self) {
        while !self.client.target.stopping() {
            self.client.pause_ms(self.ttl_ms / 3);
            if self.spec.stall_fraction > 0.0 && self.rng.gen_bool(self.spec.stall_fraction) {
                let stall = self.ttl_ms
                    + self
                        .rng
                        .gen_range(self.spec.stall_ms.0..=self.spec.stall_ms.1);
                self.figures.stalls.fetch_add(1, Ordering::Relaxed);
                self.client.freeze(
                    Instant::now() + Duration::from_millis(u64::try_from(stall).unwrap_or(0)),
                );
                self.client.thaw();
            }
            self.client.books().keep_alive();
        }
    }
}

struct Worker {
    client: Arc<SessionClient>,
    spec: LoadSpec,
    ttl_ms: i64,
    rng: StdRng,
    fenced: Arc<Resource>,
    control: Arc<Resource>,
    figures: Arc<SessionFigures>,
}

/// One key of a hold: its name, token and fence, and what the holder read there.
struct Taken {
    key: String,
    token: String,
    fence: i64,
    seen: Option<(Option<u64>, Option<u64>)>,
}

impl Worker {
    fn run(mut self) {
        let keys = self.spec.key_names();
        let sessions = self.spec.sessions.clone();
        while !self.client.target.stopping() {
            let wanted = self.rng.gen_range(1..=sessions.keys_per_hold.max(1));
            let mut picked: Vec<usize> = (0..keys.len()).collect();
            // In any order: a BLOCK lasts a quarter of a lease at most, so two holds
            // waiting on each other in a cycle only time out.
            picked.sort_by_key(|_| self.rng.gen::<u32>());
            picked.truncate(wanted);
            let mut taken: Vec<Taken> = Vec::new();
            for n in picked {
                let mode = self.spec.mode(n, &mut self.rng);
                let block = self.rng.gen_bool(sessions.block_fraction).then(|| {
                    let most = self.spec.block_ms.1.min(self.ttl_ms / 4).max(1);
                    self.rng.gen_range(self.spec.block_ms.0.min(most)..=most)
                });
                let lock_delay = if self.rng.gen_bool(sessions.lock_delay_fraction) {
                    self.rng
                        .gen_range(sessions.lock_delay_ms.0..=sessions.lock_delay_ms.1)
                } else {
                    0
                };
                let token = format!("{:032x}", self.rng.gen::<u128>());
                self.client.thaw();
                let got = self
                    .client
                    .books()
                    .acquire(&keys[n], &token, mode, block, lock_delay);
                match got {
                    Got::Granted(fence) => {
                        let writer = mode == Mode::Exclusive;
                        let seen = writer.then(|| {
                            (
                                self.fenced.read(&keys[n], fence),
                                self.control.read(&keys[n], fence),
                            )
                        });
                        taken.push(Taken {
                            key: keys[n].clone(),
                            token,
                            fence,
                            seen,
                        });
                    }
                    Got::Busy | Got::Nothing => {
                        // All or nothing, as a job needing every key would: give back
                        // what it took, back off, try again.
                        self.end(&taken);
                        taken.clear();
                        break;
                    }
                }
            }
            if taken.is_empty() {
                self.client.pause_ms(self.rng.gen_range(1..=10));
                continue;
            }
            self.client
                .pause_ms(self.rng.gen_range(sessions.hold_ms.0..=sessions.hold_ms.1));
            for taken in &taken {
                let Some((fenced, control)) = taken.seen else {
                    continue;
                };
                if let Some(seen) = fenced {
                    if !self.fenced.write(&taken.key, taken.fence, seen) {
                        self.figures.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if let Some(seen) = control {
                    self.control.write(&taken.key, taken.fence, seen);
                }
            }
            self.end(&taken);
        }
    }

    /// Ends a hold: one close of the session, or a release per key.
    fn end(&mut self, taken: &[Taken]) {
        if taken.is_empty() {
            return;
        }
        self.client.thaw();
        if self.rng.gen_bool(self.spec.sessions.close_fraction) {
            self.client.books().close();
        } else {
            for taken in taken {
                self.client.books().release(&taken.key, &taken.token);
            }
        }
    }
}
