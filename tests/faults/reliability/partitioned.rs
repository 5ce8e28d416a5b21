//! One run of the partition scenario (`topology`), in the style of Jepsen's lock tests.
//! Workers on both sides of the coming partition take exclusive locks on a few keys and,
//! under each, read-modify-write the fenced counter and the control counter (`ledger`);
//! every lock command goes into the history. Each side finds the primary by asking the
//! Sentinels it can reach, as Sentinel-aware clients do. The nemesis isolates the
//! primary; the Sentinels promote a replica; the majority side acquires there while the
//! primary's own side goes on acquiring on it; then the partition heals, the Sentinels
//! demote the old primary and it rejoins as a replica, discarding what it granted alone.
//!
//! The run's figures: overlapping holders as the lock alone shows them, acknowledged
//! grants the surviving servers never had, stale writes and lost increments of each
//! counter, and everything the fenced counter and the lock history must never show.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::checker;
use super::client::LockClient;
use super::history::{History, Mode, Op, Outcome};
use super::ledger::{self, Counter, Judged, Ledger, On};
use super::target::Target;
use super::topology::{settled_fence_clock, Topology, MAJORITY, WITH_PRIMARY};
use testkit::sentinel::primary_port;
use testkit::*;

/// How grants are made durable, if at all: the rows of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Plain asynchronous replication.
    Async,
    /// `min-replicas-to-write 1` with `min-replicas-max-lag 1` on every server.
    MinReplicas,
    /// A grant counts only once `WAIT 1` confirms a replica has it (what the Python
    /// client's `wait_replicas` does).
    Wait,
}

impl Durability {
    pub fn describe(self) -> &'static str {
        match self {
            Durability::Async => "asynchronous replication",
            Durability::MinReplicas => "min-replicas-to-write 1 (max lag 1 s)",
            Durability::Wait => "WAIT 1 after each grant (wait_replicas)",
        }
    }

    fn server_args(self) -> &'static [&'static str] {
        match self {
            Durability::MinReplicas => &["min-replicas-to-write", "1", "min-replicas-max-lag", "1"],
            _ => &[],
        }
    }
}

pub const KEYS: usize = 3;
const CLIENTS_PER_SIDE: usize = 8;
const TTL_MS: i64 = 2_000;
const BLOCK_MS: i64 = 300;
/// Time between a holder's read and its write: the window a lost lock leaves open.
/// Most holdings are short; one in `LONG_JOB_ONE_IN` is a job that holds its lock for
/// most of its lease, long enough to still run when a replica is promoted.
const WORK_MS: u64 = 5;
const LONG_JOB_MS: u64 = 1_200;
const LONG_JOB_ONE_IN: u32 = 25;

/// One run's figures.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub grants: usize,
    /// Acknowledged grants made while another holder of the key was certainly live.
    pub overlaps: usize,
    /// Acknowledged grants the old primary made that the promoted replica never had.
    pub lost_grants: usize,
    pub fenced: Judged,
    pub control: Judged,
    /// Fences both primaries issued for one key (same microsecond on one wall clock).
    pub tied_fences: usize,
    /// From the cut to the Sentinels naming a new primary, and from the heal to the old
    /// primary replicating from it.
    pub promotion_ms: u128,
    pub rejoin_ms: u128,
    /// What must never happen: in the lock history, to the fenced counter, or replicas
    /// that did not converge after the heal.
    pub anomalies: Vec<String>,
}

/// The phases of a run: steady load, then the partition until a replica is promoted,
/// both primaries granting for 1.5 s, the heal and the rejoin, steady again for 1 s.
pub fn run(durability: Durability, check_fence: bool, seed: u64) -> Figures {
    let topology = Arc::new(Topology::start(durability.server_args()));
    let keys: Vec<String> = (0..KEYS).map(|k| format!("part:{k}")).collect();
    let mut load = Workers::start(&topology, &keys, durability, check_fence, seed);
    thread::sleep(Duration::from_millis(1_000));
    // A failover before the nemesis (a Sentinel misled by a busy machine) would make
    // the run about something else.
    assert!(
        topology.sentinels_name_the_first_primary(),
        "the Sentinels failed over before the partition"
    );

    topology.isolate_primary();
    let cut = Instant::now();
    // Nothing more reaches the replicas: what they have is what a promotion keeps.
    let clocks: Vec<i64> = topology
        .servers
        .iter()
        .map(|server| settled_fence_clock(server, Duration::from_millis(800)))
        .collect();
    let promoted = topology.wait_for_promotion(Duration::from_secs(30));
    let promotion_ms = cut.elapsed().as_millis();
    thread::sleep(Duration::from_millis(1_500));

    topology.heal();
    let healed = Instant::now();
    topology.wait_for_rejoin(promoted, Duration::from_secs(30));
    let rejoin_ms = healed.elapsed().as_millis();
    // The data is compared while no client writes.
    load.hold(true);
    let converged = topology.converged(promoted);
    load.hold(false);
    thread::sleep(Duration::from_millis(1_000));
    let (ops, ledger, moves) = load.finish();

    let mut con = topology.resource.connect();
    let accesses = ledger.accesses();
    let fenced = ledger::judge(&accesses, Counter::Fenced, &mut con, &keys);
    let control = ledger::judge(&accesses, Counter::Control, &mut con, &keys);
    let deposed = topology.first_primary_address();
    let answered_by_deposed = |op: &Op| {
        moves[side_of(op.client)]
            .get(op.node)
            .is_some_and(|port| *port == deposed)
    };
    let lost_grants = ops
        .iter()
        .filter(|op| {
            op.acked_yes() && answered_by_deposed(op) && op.fence() > Some(clocks[promoted])
        })
        .count();
    // Two primaries read one wall clock: a grant on each in the same microsecond gets
    // the same fence. Counted, not judged (see the reliability doc).
    let ties = fences_of_both_primaries(&ops, &answered_by_deposed);
    let mut anomalies = checker::always_required(&ops);
    anomalies.retain(|anomaly| {
        !ties.iter().any(|(key, fence)| {
            anomaly.starts_with(&format!("{key}: fence issued twice"))
                && anomaly.contains(&format!("fence: {fence} }}"))
        })
    });
    anomalies.extend(fenced.anomalies.iter().cloned());
    if !converged {
        anomalies.push("the servers hold different data after the rejoin".into());
    }
    Figures {
        grants: ops
            .iter()
            .filter(|op| op.acked_yes() && op.fence().is_some())
            .count(),
        overlaps: checker::overlap_count(&ops),
        lost_grants,
        fenced,
        control,
        tied_fences: ties.len(),
        promotion_ms,
        rejoin_ms,
        anomalies,
    }
}

/// (key, fence) pairs that the deposed primary and another server both granted.
fn fences_of_both_primaries(
    ops: &[Op],
    by_deposed: &dyn Fn(&Op) -> bool,
) -> HashSet<(String, i64)> {
    let granted = |deposed: bool| -> HashSet<(String, i64)> {
        ops.iter()
            .filter(|op| by_deposed(op) == deposed)
            .filter_map(|op| Some((op.key.clone(), op.fence()?)))
            .collect()
    };
    granted(true)
        .intersection(&granted(false))
        .cloned()
        .collect()
}

fn side_of(client: usize) -> usize {
    client / CLIENTS_PER_SIDE
}

/// The workers of both sides and one Sentinel-asking router per side.
struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    targets: Vec<Arc<Target>>,
    history: History,
    ledger: Ledger,
    /// Per side, the server (as the Sentinels name it) of each target generation.
    moves: Vec<Arc<Mutex<Vec<u16>>>>,
}

impl Workers {
    fn start(
        topology: &Arc<Topology>,
        keys: &[String],
        durability: Durability,
        check_fence: bool,
        seed: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let history = History::default();
        let ledger = Ledger::new(check_fence);
        let first = topology.first_primary_address();
        let mut threads = Vec::new();
        let mut targets = Vec::new();
        let mut moves = Vec::new();
        for side in [WITH_PRIMARY, MAJORITY] {
            let target = Arc::new(Target::new(topology.route(side, first)));
            let moved = Arc::new(Mutex::new(vec![first]));
            threads.push(route(topology, side, &target, &moved, &stop));
            for n in 0..CLIENTS_PER_SIDE {
                let id = side * CLIENTS_PER_SIDE + n;
                let lock = LockClient::new(
                    id,
                    target.clone(),
                    history.clone(),
                    Duration::from_millis(BLOCK_MS as u64 + 700),
                    durability == Durability::Wait,
                );
                let resource = topology.resource.connect();
                resource
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .expect("read timeout");
                let worker = Worker {
                    lock,
                    resource,
                    ledger: ledger.clone(),
                    keys: keys.to_vec(),
                    rng: StdRng::seed_from_u64(seed ^ (id as u64 + 1)),
                };
                let stop = stop.clone();
                threads.push(thread::spawn(move || worker.run(&stop)));
            }
            targets.push(target);
            moves.push(moved);
        }
        Workers {
            stop,
            threads,
            targets,
            history,
            ledger,
            moves,
        }
    }

    /// Holds back (or lets go) every client's next command.
    fn hold(&self, held: bool) {
        for target in &self.targets {
            if held {
                target.close();
            } else {
                target.open();
            }
        }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for target in &self.targets {
            target.stop();
        }
    }

    /// Stops every client and router and waits for them: they hold the topology.
    fn join(&mut self) {
        self.stop();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }

    fn finish(&mut self) -> (Vec<Op>, Ledger, Vec<Vec<u16>>) {
        self.join();
        let moves = self
            .moves
            .iter()
            .map(|m| m.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect();
        (self.history.snapshot(), self.ledger.clone(), moves)
    }
}

/// A run that fails midway stops its clients and routers, so that its servers and
/// Sentinels are killed with the topology (a child process outlives the test binary).
impl Drop for Workers {
    fn drop(&mut self) {
        self.join();
    }
}

/// Every 100 ms, asks the Sentinels `side` reaches for the primary (the first that
/// answers) and moves the side's clients there through the side's own link.
fn route(
    topology: &Arc<Topology>,
    side: usize,
    target: &Arc<Target>,
    moved: &Arc<Mutex<Vec<u16>>>,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<()> {
    let (topology, target, moved, stop) = (
        topology.clone(),
        target.clone(),
        moved.clone(),
        stop.clone(),
    );
    thread::spawn(move || {
        let ports = topology.sentinel_ports(side);
        while !stop.load(Ordering::SeqCst) {
            if let Some(named) = ports.iter().find_map(|port| ask_sentinel(*port)) {
                let routed = topology.route(side, named);
                if target.current().0 != routed {
                    moved
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(named);
                    target.move_to(routed);
                }
            }
            thread::sleep(Duration::from_millis(100));
        }
    })
}

/// The primary a Sentinel names, if it answers within 300 ms.
fn ask_sentinel(port: u16) -> Option<u16> {
    let timeout = Duration::from_millis(300);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut con = client.get_connection_with_timeout(timeout).ok()?;
    con.set_read_timeout(Some(timeout)).ok()?;
    primary_port(&mut con)
}

struct Worker {
    lock: LockClient,
    resource: Connection,
    ledger: Ledger,
    keys: Vec<String>,
    rng: StdRng,
}

impl Worker {
    fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            let key = self.keys[self.rng.gen_range(0..self.keys.len())].clone();
            let asked = Instant::now();
            let Some(outcome) = self
                .lock
                .acquire(&key, TTL_MS, Some(BLOCK_MS), Mode::Exclusive)
            else {
                thread::sleep(Duration::from_millis(20));
                continue;
            };
            if let Outcome::Granted { token, fence } = outcome {
                // The client's own deadline, from when it asked (it never believes it
                // holds the lock longer), with room for the write to arrive.
                let believed_until = asked + Duration::from_millis(TTL_MS as u64 - 100);
                self.increment(&key, fence, believed_until);
                self.lock.release(&key, &token);
            }
        }
    }

    /// Both counters: read under the fence, work, write back while the lease is
    /// believed to last.
    fn increment(&mut self, key: &str, fence: i64, believed_until: Instant) {
        let on = On {
            client: self.lock.id,
            lock: key,
            fence,
        };
        let con = &mut self.resource;
        let fenced = self.ledger.read(con, on, Counter::Fenced);
        let control = self.ledger.read(con, on, Counter::Control);
        let work = if self.rng.gen_ratio(1, LONG_JOB_ONE_IN) {
            LONG_JOB_MS
        } else {
            WORK_MS
        };
        thread::sleep(Duration::from_millis(work));
        if Instant::now() >= believed_until {
            return;
        }
        let con = &mut self.resource;
        if let Some(read) = fenced {
            self.ledger.write(con, on, Counter::Fenced, read);
        }
        if let Some(read) = control {
            self.ledger.write(con, on, Counter::Control, read);
        }
    }
}
