//! All or nothing under contention (issue 23): 32 clients, each on its own connection
//! with its own `TOKEN` (even clients) or `SESSION` (odd ones), take random overlapping
//! sets of 2-5 of 12 keys with `LOCK.ACQUIREALL … BLOCK`, hold briefly and release
//! every key with `LOCK.RELEASE`, in the order asked, for `FENCELOCK_ALL_OR_NOTHING_SECS`
//! (default 60).
//!
//! From the holders' side: after each grant every key of its set is held by its token
//! with the reply's fences, and while a client holds, no other client is granted any of
//! its keys. From a watcher's atomic snapshots (`MULTI` of `LOCK.INFO` on every key,
//! judged once every grant is known): no grant is ever seen holding part of its set
//! beyond what its holder's releases, sent in order, have already given back, and no
//! key is held under a fence no client was granted. No wait is refused `DEADLOCK`: a
//! client holds nothing while it waits, so no wait for several keys can close a cycle.
//! Every request is answered exactly once (requests and replies counted per client, a
//! `PING` after the last one answered `PONG`, nobody left blocked), and grants are
//! shared fairly: Jain's index over the grants per client, printed with them.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use testkit::resp::{encode, Conn, Reply};
use testkit::*;

use crate::reliability::report::{assert_none, Summary};

const CLIENTS: usize = 32;
const KEYS: usize = 12;
/// Far longer than any hold: a lease never runs out, so every release must find it.
const TTL_MS: i64 = 10_000;
const BLOCK_MS: i64 = 5_000;
/// The least Jain's index over grants per client that counts as fair.
const FAIRNESS: f64 = 0.8;

/// How long the clients run: `FENCELOCK_ALL_OR_NOTHING_SECS`, default 60.
fn run_for() -> Duration {
    let secs = std::env::var("FENCELOCK_ALL_OR_NOTHING_SECS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

fn key(n: usize) -> String {
    format!("all:{n}")
}

/// One grant as its holder received it: the keys in the order asked (and released),
/// each with its fence.
struct Granted {
    client: usize,
    keys: Vec<(usize, i64)>,
}

/// What one client did.
#[derive(Default)]
struct Tally {
    sent: usize,
    answered: usize,
    grants: Vec<Granted>,
    /// Nil: the `BLOCK` timeout passed.
    timeouts: usize,
    /// Error replies, whole.
    errors: Vec<String>,
    anomalies: Vec<String>,
}

/// Which client holds each key, by the holders' own word: set once a grant is checked,
/// cleared before its first release is sent.
type Holders = Mutex<Vec<Option<usize>>>;

fn send(conn: &mut Conn, commands: &[Vec<String>]) -> io::Result<()> {
    let mut frame = Vec::new();
    for argv in commands {
        let argv: Vec<&[u8]> = argv.iter().map(|arg| arg.as_bytes()).collect();
        encode(&mut frame, &argv);
    }
    conn.send(&frame)
}

fn call(conn: &mut Conn, argv: Vec<String>) -> io::Result<Reply> {
    send(conn, &[argv])?;
    conn.read_reply()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| arg.to_string()).collect()
}

struct Client {
    id: usize,
    conn: Conn,
    rng: StdRng,
    /// `TOKEN t` or `SESSION s`.
    owner: [String; 2],
    holders: Arc<Holders>,
    tally: Tally,
}

impl Client {
    fn new(id: usize, port: u16, holders: Arc<Holders>) -> Self {
        let conn = Conn::connect(port).expect("connect");
        let wait = Duration::from_millis(u64::try_from(BLOCK_MS).unwrap_or(0) + 5_000);
        conn.set_read_timeout(wait).expect("read timeout");
        let owner = if id.is_multiple_of(2) {
            ["TOKEN".into(), format!("token-{id}")]
        } else {
            ["SESSION".into(), format!("session-{id}")]
        };
        Client {
            id,
            conn,
            rng: StdRng::seed_from_u64(0x00a1_10f0 ^ (id as u64).wrapping_mul(0x9e37)),
            owner,
            holders,
            tally: Tally::default(),
        }
    }

    fn run(mut self, stop: &AtomicBool) -> Tally {
        while !stop.load(Ordering::SeqCst) {
            if let Err(error) = self.round() {
                self.tally
                    .anomalies
                    .push(format!("client {}: connection failed: {error}", self.id));
                return self.tally;
            }
        }
        match call(&mut self.conn, strings(&["PING"])) {
            Ok(Reply::Status(pong)) if pong == "PONG" => {}
            other => self.tally.anomalies.push(format!(
                "client {}: a PING after the last request got {other:?} (a reply too many?)",
                self.id
            )),
        }
        self.tally
    }

    /// One acquire of a random set, and if granted: check, hold, release.
    fn round(&mut self) -> io::Result<()> {
        let size = self.rng.gen_range(2..=5);
        let all: Vec<usize> = (0..KEYS).collect();
        let set: Vec<usize> = all.choose_multiple(&mut self.rng, size).copied().collect();
        let mut argv = vec!["LOCK.ACQUIREALL".to_string(), size.to_string()];
        argv.extend(set.iter().map(|&n| key(n)));
        argv.push(TTL_MS.to_string());
        argv.extend(self.owner.iter().cloned());
        argv.extend(strings(&["BLOCK", &BLOCK_MS.to_string()]));
        self.tally.sent += 1;
        let reply = match call(&mut self.conn, argv.clone()) {
            Ok(reply) => reply,
            Err(error) => {
                self.tally
                    .anomalies
                    .push(format!("client {}: no reply to {argv:?}: {error}", self.id));
                return Err(error);
            }
        };
        self.tally.answered += 1;
        let (token, fences) = match &reply {
            reply if reply.is_nil() => {
                self.tally.timeouts += 1;
                return Ok(());
            }
            Reply::Error(text) => {
                self.tally.errors.push(text.clone());
                return Ok(());
            }
            other => match grant_all_of(other) {
                Some(grant) => grant,
                None => {
                    let what =
                        format!("client {}: malformed reply to {argv:?}: {other:?}", self.id);
                    self.tally.anomalies.push(what);
                    return Ok(());
                }
            },
        };
        if fences.len() != set.len() || (self.id.is_multiple_of(2) && token != self.owner[1]) {
            self.tally.anomalies.push(format!(
                "client {}: {argv:?} granted {token} with fences {fences:?}",
                self.id
            ));
        }
        self.check_held(&set, &token, &fences)?;
        self.claim(&set);
        thread::sleep(Duration::from_micros(self.rng.gen_range(0..=3_000)));
        self.unclaim(&set);
        for &n in &set {
            let released = call(&mut self.conn, strings(&["LOCK.RELEASE", &key(n), &token]))?;
            if released != Reply::Integer(1) {
                self.tally.anomalies.push(format!(
                    "client {}: LOCK.RELEASE {} of its grant answered {released:?}",
                    self.id,
                    key(n)
                ));
            }
        }
        self.tally.grants.push(Granted {
            client: self.id,
            keys: set.into_iter().zip(fences).collect(),
        });
        Ok(())
    }

    /// Right after the grant, before anything of it is given back: every key of the set
    /// is held by the token, with the fence the reply gave it (one round trip).
    fn check_held(&mut self, set: &[usize], token: &str, fences: &[i64]) -> io::Result<()> {
        let reads: Vec<Vec<String>> = set
            .iter()
            .map(|&n| strings(&["LOCK.FENCE", &key(n), token]))
            .collect();
        send(&mut self.conn, &reads)?;
        for (&n, fence) in set.iter().zip(fences) {
            let held = self.conn.read_reply()?;
            if held != Reply::Integer(*fence) {
                self.tally.anomalies.push(format!(
                    "client {}: partial grant: {} reads {held:?} for {token}, granted fence {fence} (set {:?})",
                    self.id,
                    key(n),
                    set.iter().map(|&n| key(n)).collect::<Vec<_>>()
                ));
            }
        }
        Ok(())
    }

    /// Says this client holds `set`; another client saying so of one of its keys held
    /// it at the same time.
    fn claim(&mut self, set: &[usize]) {
        let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        for &n in set {
            if let Some(other) = holders[n].replace(self.id) {
                self.tally.anomalies.push(format!(
                    "client {} was granted {} while client {other} held it",
                    self.id,
                    key(n)
                ));
            }
        }
    }

    fn unclaim(&mut self, set: &[usize]) {
        let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        for &n in set {
            if holders[n] == Some(self.id) {
                holders[n] = None;
            }
        }
    }
}

/// The fence `LOCK.INFO` shows for a key (`None`: free, or no holder shown).
fn fence_in(info: &Reply) -> Option<i64> {
    let Reply::Array(Some(fields)) = info else {
        return None;
    };
    fields
        .chunks(2)
        .find(|pair| match &pair[0] {
            Reply::Status(name) => name == "fence",
            name => name.bulk() == Some(b"fence".as_slice()),
        })
        .and_then(|pair| pair.get(1)?.integer())
}

/// Atomic snapshots of every key's fence (`MULTI`, `LOCK.INFO` of each key, `EXEC`),
/// taken one after another until `stop`.
fn watch(port: u16, stop: &AtomicBool) -> Vec<Vec<Option<i64>>> {
    let mut conn = Conn::connect(port).expect("connect the watcher");
    let mut commands = vec![strings(&["MULTI"])];
    commands.extend((0..KEYS).map(|n| strings(&["LOCK.INFO", &key(n)])));
    commands.push(strings(&["EXEC"]));
    let mut snapshots = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        send(&mut conn, &commands).expect("the watcher's snapshot");
        for _ in 0..=KEYS {
            conn.read_reply().expect("MULTI and QUEUED");
        }
        let exec = conn.read_reply().expect("EXEC");
        let Reply::Array(Some(infos)) = exec else {
            panic!("EXEC answered {exec:?}")
        };
        snapshots.push(infos.iter().map(fence_in).collect());
        thread::sleep(Duration::from_millis(1));
    }
    snapshots
}

/// What the snapshots show of each grant: whole, partly given back by releases in order
/// (a held suffix of the set), or an anomaly: part of a set held otherwise, or a fence
/// nobody was granted.
struct Seen {
    whole: usize,
    releasing: usize,
    anomalies: Vec<String>,
}

fn judge(snapshots: &[Vec<Option<i64>>], grants: &[&Granted]) -> Seen {
    let mut by_fence: HashMap<(usize, i64), (usize, usize)> = HashMap::new();
    for (g, grant) in grants.iter().enumerate() {
        for (at, &(n, fence)) in grant.keys.iter().enumerate() {
            by_fence.insert((n, fence), (g, at));
        }
    }
    let mut seen = Seen {
        whole: 0,
        releasing: 0,
        anomalies: Vec::new(),
    };
    for (s, snapshot) in snapshots.iter().enumerate() {
        let mut held: HashMap<usize, Vec<usize>> = HashMap::new();
        for (n, fence) in snapshot.iter().enumerate() {
            let Some(fence) = fence else { continue };
            match by_fence.get(&(n, *fence)) {
                Some(&(g, at)) => held.entry(g).or_default().push(at),
                None => seen.anomalies.push(format!(
                    "snapshot {s}: {} held under fence {fence}, granted to no client",
                    key(n)
                )),
            }
        }
        for (g, mut at) in held {
            at.sort_unstable();
            let size = grants[g].keys.len();
            if at.len() == size {
                seen.whole += 1;
            } else if at == (size - at.len()..size).collect::<Vec<_>>() {
                seen.releasing += 1;
            } else {
                let keys: Vec<String> = grants[g].keys.iter().map(|&(n, _)| key(n)).collect();
                seen.anomalies.push(format!(
                    "snapshot {s}: partial holding: client {}'s grant of {keys:?} holds only positions {at:?}",
                    grants[g].client
                ));
            }
        }
    }
    seen
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has everything.
fn jain(x: &[usize]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let squares: f64 = x.iter().map(|&v| (v as f64).powi(2)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

#[test]
fn waits_for_several_keys_never_hold_part_never_deadlock_and_share_fairly() {
    let server = Server::start();
    let run = run_for();
    let stop = Arc::new(AtomicBool::new(false));
    let holders: Arc<Holders> = Arc::new(Mutex::new(vec![None; KEYS]));
    let port = server.port;
    let watcher = {
        let stop = stop.clone();
        thread::spawn(move || watch(port, &stop))
    };
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let client = Client::new(id, port, holders.clone());
            let stop = stop.clone();
            thread::spawn(move || client.run(&stop))
        })
        .collect();
    let started = Instant::now();
    thread::sleep(run);
    stop.store(true, Ordering::SeqCst);
    let tallies: Vec<Tally> = clients
        .into_iter()
        .map(|client| client.join().expect("a client panicked"))
        .collect();
    let snapshots = watcher.join().expect("the watcher panicked");
    let elapsed = started.elapsed();

    let mut con = server.connect();
    let mut anomalies: Vec<String> = tallies
        .iter()
        .flat_map(|tally| tally.anomalies.iter().cloned())
        .collect();
    let errors: Vec<&String> = tallies.iter().flat_map(|tally| &tally.errors).collect();
    let deadlocks = errors.iter().filter(|e| e.starts_with("DEADLOCK")).count();
    anomalies.extend(errors.iter().map(|e| format!("error reply: {e}")));
    for (id, tally) in tallies.iter().enumerate() {
        if tally.sent != tally.answered {
            anomalies.push(format!(
                "client {id}: {} requests, {} replies",
                tally.sent, tally.answered
            ));
        }
    }
    for (field, section) in [
        ("fencelock_waiters", "fencelock"),
        ("fencelock_deadlocks", "fencelock"),
        ("blocked_clients", "clients"),
    ] {
        let value = info_field(&mut con, section, field);
        if value.as_deref() != Some("0") {
            anomalies.push(format!("after the run {field} is {value:?}"));
        }
    }
    if int(&mut con, &["DBSIZE"]) != 0 {
        anomalies.push("keys left held after every client released".into());
    }
    let grants: Vec<&Granted> = tallies.iter().flat_map(|tally| &tally.grants).collect();
    let seen = judge(&snapshots, &grants);
    anomalies.extend(seen.anomalies.iter().cloned());

    let per_client: Vec<usize> = tallies.iter().map(|tally| tally.grants.len()).collect();
    let fairness = jain(&per_client);
    let requests: usize = tallies.iter().map(|tally| tally.sent).sum();
    let timeouts: usize = tallies.iter().map(|tally| tally.timeouts).sum();
    let handoffs = info_field(&mut con, "fencelock", "fencelock_handoffs").unwrap_or_default();
    println!("ALL-OR-NOTHING grants per client: {per_client:?}; Jain's index {fairness:.4}");
    Summary {
        scenario: "all or nothing",
        fault: format!(
            "{CLIENTS} clients on {KEYS} keys, sets of 2-5 (LOCK.ACQUIREALL BLOCK {BLOCK_MS} ms), for {} s",
            elapsed.as_secs()
        ),
        load: "even clients TOKEN, odd clients SESSION; hold 0-3 ms, release in order".into(),
        ops: requests,
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants ({:.0}/s), {timeouts} BLOCK timeouts, {deadlocks} DEADLOCK replies, handoffs (per key) {handoffs}; {} snapshots: {} grants seen whole, {} partly released; grants per client min {} max {}, Jain's index {fairness:.4}",
            grants.len(),
            grants.len() as f64 / elapsed.as_secs_f64(),
            snapshots.len(),
            seen.whole,
            seen.releasing,
            per_client.iter().min().unwrap_or(&0),
            per_client.iter().max().unwrap_or(&0),
        ),
    }
    .emit();
    assert_none("all or nothing", &anomalies);
    assert_eq!(deadlocks, 0, "waits for several keys refused DEADLOCK");
    assert!(
        grants.len() >= CLIENTS * 10,
        "too few grants to judge: {}",
        grants.len()
    );
    assert!(
        seen.whole > 0,
        "the watcher never saw a grant held: {} snapshots",
        snapshots.len()
    );
    assert!(
        fairness > FAIRNESS,
        "unfair: Jain's index {fairness:.4} over grants per client {per_client:?}"
    );
}
