//! The load: many client threads contending for a few keys, mixing plain and BLOCK
//! acquires. Each holder holds for a while (sometimes, like a GC pause, well past its
//! lease), sometimes refreshes, and releases. Exclusive holders also read the protected
//! resources when their hold starts and write them back before releasing.
//!
//! Keys come in three kinds: mutexes (every holder exclusive), read-write locks (readers
//! `SHARED`, writers exclusive) and semaphores (every holder `LIMIT n`). Every holder of a
//! key asks the same way, so no acquire is ever refused for its mode.
//!
//! Now and then a plain client takes 2-3 keys of one kind at once with
//! `LOCK.ACQUIREALL` (in a random order, one mode for all), holds them together and
//! gives each back with `LOCK.RELEASE`: each key's holding is judged like any other.
//!
//! Beside these plain clients, a load may run session clients on the same keys
//! (`session`): holdings of a session kept alive by its heartbeat alone.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::client::LockClient;
use super::guarded::{counter_key, guard, read_value, GuardedCounts};
use super::history::{History, Mode, Op, Outcome};
use super::resource::{Counts, Resource};
use super::session::{self, SessionFigures, SessionSpec};
use super::target::Target;

#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub clients: usize,
    /// Mutexes: keys `0..keys`.
    pub keys: usize,
    /// Read-write locks, the keys after the mutexes; `readers` is the share of their
    /// acquires that are `SHARED`.
    pub read_write_keys: usize,
    pub readers: f64,
    /// Semaphores of `permits`, the keys after the read-write locks.
    pub semaphore_keys: usize,
    pub permits: i64,
    pub key_prefix: &'static str,
    /// Lease lengths, inclusive range in ms.
    pub ttl_ms: (i64, i64),
    /// Share of acquires that BLOCK, and their timeouts in ms.
    pub block_fraction: f64,
    /// Share of acquires that take several keys at once (`LOCK.ACQUIREALL`).
    pub several_fraction: f64,
    pub block_ms: (i64, i64),
    /// Share of holds that overrun the lease, and by how much (ms).
    pub overrun_fraction: f64,
    pub overrun_ms: (i64, i64),
    /// Share of holds that refresh halfway.
    pub refresh_fraction: f64,
    pub read_timeout: Duration,
    /// Count an answer as acknowledged only once `WAIT 1` confirms it.
    pub confirm_with_wait: bool,
    /// Holders also increment a counter in Redis through `LOCK.GUARD` (`guarded`).
    pub guarded_counter: bool,
    /// Session clients beside the `clients` plain ones (none unless asked for).
    pub sessions: SessionSpec,
    pub seed: u64,
}

impl LoadSpec {
    /// 50 clients on 6 keys, leases of 150–600 ms, a third of acquires BLOCK.
    pub fn standard(key_prefix: &'static str) -> Self {
        LoadSpec {
            clients: 50,
            keys: 6,
            read_write_keys: 0,
            readers: 0.7,
            semaphore_keys: 0,
            permits: 3,
            key_prefix,
            ttl_ms: (150, 600),
            block_fraction: 0.35,
            several_fraction: 0.15,
            block_ms: (50, 800),
            overrun_fraction: 0.08,
            overrun_ms: (20, 250),
            refresh_fraction: 0.3,
            read_timeout: Duration::from_secs(3),
            confirm_with_wait: false,
            guarded_counter: false,
            sessions: SessionSpec::none(),
            seed: 0x00fe_11ce,
        }
    }

    /// The standard load on its mutexes, plus two read-write locks and two semaphores.
    pub fn with_shared_holders(key_prefix: &'static str) -> Self {
        LoadSpec {
            read_write_keys: 2,
            semaphore_keys: 2,
            ..Self::standard(key_prefix)
        }
    }

    /// Every key of the load: mutexes, then read-write locks, then semaphores.
    pub fn key_names(&self) -> Vec<String> {
        (0..self.keys + self.read_write_keys + self.semaphore_keys)
            .map(|n| format!("{}{n}", self.key_prefix))
            .collect()
    }

    /// How a holder of key `n` asks for it.
    pub fn mode(&self, n: usize, rng: &mut StdRng) -> Mode {
        if n < self.keys {
            Mode::Exclusive
        } else if n < self.keys + self.read_write_keys {
            if rng.gen_bool(self.readers) {
                Mode::Shared
            } else {
                Mode::Exclusive
            }
        } else {
            Mode::Limit(self.permits)
        }
    }

    /// 2-3 keys of one kind with at least two (mutexes, read-write locks or semaphores:
    /// one mode fits them all), in a random order; `None` when no kind has two.
    pub fn several(&self, rng: &mut StdRng) -> Option<Vec<usize>> {
        let read_write = self.keys..self.keys + self.read_write_keys;
        let semaphores = read_write.end..read_write.end + self.semaphore_keys;
        let kinds: Vec<std::ops::Range<usize>> = [0..self.keys, read_write, semaphores]
            .into_iter()
            .filter(|kind| kind.len() >= 2)
            .collect();
        let kind: Vec<usize> = kinds.choose(rng)?.clone().collect();
        let n = rng.gen_range(2..=kind.len().min(3));
        Some(kind.choose_multiple(rng, n).copied().collect())
    }

    pub fn describe(&self) -> String {
        let mut keys = format!("{} keys", self.keys);
        if self.read_write_keys > 0 {
            keys += &format!(
                " + {} read-write ({:.0}% readers)",
                self.read_write_keys,
                self.readers * 100.0
            );
        }
        if self.semaphore_keys > 0 {
            keys += &format!(" + {} semaphores of {}", self.semaphore_keys, self.permits);
        }
        let sessions = if self.sessions.clients > 0 {
            format!(" + {}", self.sessions.describe())
        } else {
            String::new()
        };
        format!(
            "{} clients{sessions}, {keys}, ttl {}-{} ms, {:.0}% BLOCK, {:.0}% of several keys",
            self.clients,
            self.ttl_ms.0,
            self.ttl_ms.1,
            self.block_fraction * 100.0,
            self.several_fraction * 100.0
        )
    }
}

/// A running load; `finish` stops it and returns what happened.
pub struct Load {
    pub target: Arc<Target>,
    pub history: History,
    pub fenced: Arc<Resource>,
    pub control: Arc<Resource>,
    pub guarded: Arc<GuardedCounts>,
    pub sessions: Arc<SessionFigures>,
    workers: Vec<JoinHandle<()>>,
}

/// What a finished load leaves for the checks.
pub struct Finished {
    pub ops: Vec<Op>,
    pub fenced: Counts,
    pub control: Counts,
    pub guarded: Arc<GuardedCounts>,
    pub sessions: Arc<SessionFigures>,
}

impl Load {
    pub fn start(spec: LoadSpec, target: Arc<Target>) -> Self {
        let history = History::default();
        let fenced = Arc::new(Resource::fenced());
        let control = Arc::new(Resource::unfenced_control());
        let guarded = Arc::new(GuardedCounts::default());
        let sessions = Arc::new(SessionFigures::default());
        let mut workers: Vec<JoinHandle<()>> = (0..spec.clients)
            .map(|id| {
                let worker = Worker {
                    client: LockClient::new(
                        id,
                        target.clone(),
                        history.clone(),
                        spec.read_timeout,
                        spec.confirm_with_wait,
                    ),
                    spec: spec.clone(),
                    rng: StdRng::seed_from_u64(spec.seed ^ (id as u64).wrapping_mul(0x9e37)),
                    target: target.clone(),
                    fenced: fenced.clone(),
                    control: control.clone(),
                    guarded: guarded.clone(),
                };
                thread::spawn(move || worker.run())
            })
            .collect();
        for id in spec.clients..spec.clients + spec.sessions.clients {
            let client = LockClient::new(
                id,
                target.clone(),
                history.clone(),
                spec.read_timeout,
                spec.confirm_with_wait,
            );
            let resources = (fenced.clone(), control.clone());
            workers.extend(session::start(
                id,
                &spec,
                client,
                resources,
                sessions.clone(),
            ));
        }
        Load {
            target,
            history,
            fenced,
            control,
            guarded,
            sessions,
            workers,
        }
    }

    pub fn finish(self) -> Finished {
        self.target.stop();
        for worker in self.workers {
            worker.join().expect("load worker panicked");
        }
        Finished {
            ops: self.history.snapshot(),
            fenced: self.fenced.counts(),
            control: self.control.counts(),
            guarded: self.guarded,
            sessions: self.sessions,
        }
    }
}

struct Worker {
    client: LockClient,
    spec: LoadSpec,
    rng: StdRng,
    target: Arc<Target>,
    fenced: Arc<Resource>,
    control: Arc<Resource>,
    guarded: Arc<GuardedCounts>,
}

impl Worker {
    fn run(mut self) {
        let keys = self.spec.key_names();
        while !self.target.stopping() {
            let several = self
                .rng
                .gen_bool(self.spec.several_fraction)
                .then(|| self.spec.several(&mut self.rng))
                .flatten();
            let chosen = several.unwrap_or_else(|| vec![self.rng.gen_range(0..keys.len())]);
            let mode = self.spec.mode(chosen[0], &mut self.rng);
            let ttl = self.rng.gen_range(self.spec.ttl_ms.0..=self.spec.ttl_ms.1);
            let block = self.rng.gen_bool(self.spec.block_fraction).then(|| {
                self.rng
                    .gen_range(self.spec.block_ms.0..=self.spec.block_ms.1)
            });
            let names: Vec<String> = chosen.iter().map(|&n| keys[n].clone()).collect();
            let outcomes = if names.len() > 1 {
                self.client.acquire_all(&names, ttl, block, mode)
            } else {
                self.client
                    .acquire(&names[0], ttl, block, mode)
                    .map(|outcome| vec![outcome])
            };
            match outcomes.as_deref() {
                Some([Outcome::Granted { token, .. }, ..]) => {
                    let token = token.clone();
                    let fences = outcomes
                        .iter()
                        .flatten()
                        .filter_map(|outcome| match outcome {
                            Outcome::Granted { fence, .. } => Some(*fence),
                            _ => None,
                        });
                    let held: Vec<(String, i64)> = names.into_iter().zip(fences).collect();
                    self.hold(&held, &token, ttl, mode);
                }
                // Busy: a real client would back off before polling again.
                Some([Outcome::Busy, ..]) => pause_ms(self.rng.gen_range(1..=5)),
                _ => pause_ms(5),
            }
        }
    }

    /// Holds a grant (of one key, or of several at once) until releasing it, key by
    /// key. Only an exclusive holder touches the resources: shared holders may overlap
    /// by design, and would make each other's writes stale.
    fn hold(&mut self, held: &[(String, i64)], token: &str, ttl: i64, mode: Mode) {
        let writer = mode == Mode::Exclusive;
        let mut seen = Vec::with_capacity(held.len());
        for (key, fence) in held {
            let fenced_seen = writer.then(|| self.fenced.read(key, *fence)).flatten();
            let control_seen = writer.then(|| self.control.read(key, *fence)).flatten();
            let counted = if writer && self.spec.guarded_counter {
                self.client
                    .query(&guard(key, token, &["GET", &counter_key(key)]))
                    .and_then(read_value)
            } else {
                None
            };
            seen.push((fenced_seen, control_seen, counted));
        }
        let hold = if self.rng.gen_bool(self.spec.overrun_fraction) {
            ttl + self
                .rng
                .gen_range(self.spec.overrun_ms.0..=self.spec.overrun_ms.1)
        } else {
            self.rng.gen_range(0..=ttl / 4)
        };
        if self.rng.gen_bool(self.spec.refresh_fraction) {
            pause_ms(hold / 2);
            // The answer does not stop the holder: a paused process does not know either.
            for (key, _) in held {
                let _ = self.client.refresh(key, token, ttl);
            }
            pause_ms(hold - hold / 2);
        } else {
            pause_ms(hold);
        }
        for ((key, fence), (fenced_seen, control_seen, counted)) in held.iter().zip(seen) {
            if let Some(seen) = fenced_seen {
                self.fenced.write(key, *fence, seen);
            }
            if let Some(seen) = control_seen {
                self.control.write(key, *fence, seen);
            }
            if let Some(seen) = counted {
                let next = (seen + 1).to_string();
                let counter = counter_key(key);
                if let Some(sent) = self
                    .client
                    .write(&guard(key, token, &["SET", &counter, &next]))
                {
                    self.guarded.record(key, seen + 1, &sent);
                }
            }
        }
        for (key, _) in held {
            let _ = self.client.release(key, token);
        }
    }
}

fn pause_ms(ms: i64) {
    thread::sleep(Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
}
