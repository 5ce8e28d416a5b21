//! Run once under faults: clients claim keys over and over (`LOCK.ONCE … BLOCK`); a run
//! stores its result, or its client crashes mid-work (its connection dropped, its lease
//! left to run out), or gives it up. Two faults midway: the server is killed (`kill -9`)
//! and restarted from its AOF; or a primary with a replica is killed and the replica
//! promoted, its clients keeping the documented recipe (`WAIT 1` after a grant and after
//! `LOCK.DONE`). The history is then judged (`reliability::once_history`): at most one
//! successful run per keep window, every duplicate answered with that run's result, runs
//! ordered by fence and never two at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use testkit::*;

use crate::failover::kill_primary_and_promote;
use crate::reliability::history::now_us;
use crate::reliability::once_history::{self, OnceHistory, Replay, Run, RunEnd};
use crate::reliability::report::{assert_none, Summary};
use crate::reliability::target::{Link, Target};
use crate::reliability::topology::follow;

const CLIENTS: usize = 8;
const TTL_MS: i64 = 300;
/// Longer than the scenario: a stored result answers every later claim of its key.
const KEEP_MS: i64 = 120_000;
/// How long a client waits for a replica's acknowledgement (`WAIT 1 <ms>`).
const WAIT_MS: i64 = 100;

/// How the clients of a scenario claim.
#[derive(Clone, Copy)]
struct Claims {
    /// A few fixed keys (`None`), or keys that move on every so many ms: a fresh window
    /// of four keys keeps runs going on whenever the fault strikes.
    moving_keys_ms: Option<u128>,
    /// The failover recipe: a grant counts only once `WAIT 1` confirms a replica has
    /// it (else it is given up unused), and a stored result only once `WAIT 1` confirms
    /// its `DONE` (else its outcome is unknown).
    confirm_with_wait: bool,
}

/// What the clients saw beside the history.
#[derive(Default)]
struct Tally {
    unconfirmed_grants: AtomicUsize,
    unconfirmed_done: AtomicUsize,
}

struct Shared {
    target: Target,
    history: Mutex<OnceHistory>,
    tally: Tally,
    started: Instant,
}

/// One client's loop until the target stops: each claim recorded in the history.
fn client(id: usize, claims: Claims, shared: &Shared) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(id as u64 ^ now_us() as u64);
    let mut link: Link = None;
    let mut first_run = true;
    while !shared.target.stopping() {
        if shared
            .target
            .connect(&mut link, Duration::from_secs(5))
            .is_none()
        {
            continue;
        }
        let Some((con, _, _)) = link.as_mut() else {
            continue;
        };
        let key = match claims.moving_keys_ms {
            // Half the claims go to the window's fresh keys, half to any key before:
            // duplicates that come back after the fault.
            Some(every) => {
                let window = shared.started.elapsed().as_millis() / every;
                let from = if rng.gen_bool(0.5) { window } else { 0 };
                format!("order:{}", rng.gen_range(from..window + 4))
            }
            None => format!("order:{}", rng.gen_range(0..6)),
        };
        let claimed_us = now_us();
        let reply = once_claim_raw(con, &key);
        let answered_us = now_us();
        let items = match reply {
            Ok(Value::Array(items)) => items,
            Ok(_) => continue,
            Err(_) => {
                // The server went away: whatever the claim did is unknown, and a run it
                // may have been granted ends with its lease.
                link = None;
                continue;
            }
        };
        match items.as_slice() {
            [Value::Nil, Value::Int(fence), Value::BulkString(result)] => {
                shared.history.lock().unwrap().replays.push(Replay {
                    client: id,
                    key,
                    fence: *fence,
                    result: String::from_utf8_lossy(result).into_owned(),
                    answered_us,
                });
            }
            [Value::BulkString(token), Value::Int(fence)] => {
                let token = String::from_utf8_lossy(token).into_owned();
                if claims.confirm_with_wait && !replicated(con) {
                    // Not held by the recipe: given up unused, and no run.
                    shared
                        .tally
                        .unconfirmed_grants
                        .fetch_add(1, Ordering::Relaxed);
                    let _ = cmd("LOCK.RELEASE").arg(&key).arg(&token).query::<i64>(con);
                    continue;
                }
                let run = (id, key.as_str(), token.as_str(), *fence);
                let end = finish(con, &mut rng, run, first_run, claims, &shared.tally);
                first_run = false;
                if matches!(end, RunEnd::Unknown { .. }) {
                    link = None;
                }
                shared.history.lock().unwrap().runs.push(Run {
                    client: id,
                    key,
                    fence: *fence,
                    claimed_us,
                    granted_us: answered_us,
                    ttl_ms: TTL_MS,
                    end,
                });
            }
            other => panic!("unexpected claim reply {other:?}"),
        }
    }
}

fn once_claim_raw(con: &mut Connection, key: &str) -> redis::RedisResult<Value> {
    cmd("LOCK.ONCE")
        .arg(key)
        .arg(TTL_MS)
        .arg("KEEP")
        .arg(KEEP_MS)
        .arg("BLOCK")
        .arg(1_000)
        .query(con)
}

/// `WAIT 1`: whether a replica acknowledged everything this connection wrote.
fn replicated(con: &mut Connection) -> bool {
    cmd("WAIT")
        .arg(1)
        .arg(WAIT_MS)
        .query::<i64>(con)
        .is_ok_and(|replicas| replicas >= 1)
}

/// The work of a run, then how it ends: mostly a stored result; sometimes a crash
/// (nothing more is sent: the lease runs out) or a release. A client's first run is
/// always given up (a crash or a release by turns), so that every history has retries:
/// with few keys kept longer than the scenario there are only a handful of runs, and
/// by chance alone all of them could store their result.
fn finish(
    con: &mut Connection,
    rng: &mut impl Rng,
    (id, key, token, fence): (usize, &str, &str, i64),
    first_run: bool,
    claims: Claims,
    tally: &Tally,
) -> RunEnd {
    std::thread::sleep(Duration::from_millis(rng.gen_range(5..40)));
    let ending = if first_run {
        id % 2
    } else {
        rng.gen_range(0..6)
    };
    match ending {
        0 => RunEnd::Unknown { result: None },
        1 => {
            let sent_us = now_us();
            match cmd("LOCK.RELEASE").arg(key).arg(token).query::<i64>(con) {
                Ok(_) => RunEnd::Released { sent_us },
                Err(_) => RunEnd::Unknown { result: None },
            }
        }
        _ => {
            let result = format!("paid by {id} under {fence}");
            let sent_us = now_us();
            match cmd("LOCK.DONE")
                .arg(key)
                .arg(token)
                .arg(&result)
                .query::<i64>(con)
            {
                Ok(1) if claims.confirm_with_wait && !replicated(con) => {
                    tally.unconfirmed_done.fetch_add(1, Ordering::Relaxed);
                    RunEnd::Unknown {
                        result: Some(result),
                    }
                }
                Ok(1) => RunEnd::Stored { sent_us, result },
                Ok(_) => RunEnd::Refused,
                Err(_) => RunEnd::Unknown {
                    result: Some(result),
                },
            }
        }
    }
}

/// Starts the clients against `port`, runs `fault` once they have run a while, lets
/// them run as long again, stops them and returns what they saw.
fn run_scenario(port: u16, claims: Claims, fault: impl FnOnce(&Target)) -> (OnceHistory, Tally) {
    let shared = Arc::new(Shared {
        target: Target::new(port),
        history: Mutex::default(),
        tally: Tally::default(),
        started: Instant::now(),
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || client(id, claims, &shared))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_500));
    fault(&shared.target);
    std::thread::sleep(Duration::from_millis(1_500));
    shared.target.stop();
    for client in clients {
        client.join().unwrap();
    }
    let Ok(shared) = Arc::try_unwrap(shared) else {
        panic!("every client has finished");
    };
    (shared.history.into_inner().unwrap(), shared.tally)
}

/// Runs that stored nothing (retried after them) and results replayed: the scenario
/// exercised what it judges.
fn assert_exercised(history: &OnceHistory) {
    let retried = history
        .runs
        .iter()
        .filter(|run| !matches!(run.end, RunEnd::Stored { .. }))
        .count();
    assert!(
        retried > 0 && !history.replays.is_empty(),
        "the scenario gave up runs and replayed results: {} runs, {} replays",
        history.runs.len(),
        history.replays.len()
    );
}

#[test]
fn runs_once_through_crashed_holders_and_a_server_restart() {
    let mut server = Server::with_args(&aof_always("yes"));
    let claims = Claims {
        moving_keys_ms: None,
        confirm_with_wait: false,
    };
    let (history, _) = run_scenario(server.port, claims, |_| {
        server.kill();
        server.restart();
    });
    let anomalies = once_history::all_anomalies(&history, KEEP_MS);
    assert!(anomalies.is_empty(), "{anomalies:#?}");
    assert_exercised(&history);
}

/// A primary and a replica that follows it through a proxy (the link a test cuts).
fn replicated_through_a_proxy() -> (Server, Server, Proxy) {
    let primary = Server::start();
    let replica = Server::start();
    let link = Proxy::to(primary.port);
    follow(&replica, link.port);
    (primary, replica, link)
}

/// A replica promoted after its primary's `kill -9`. It replicates through a proxy,
/// cut just before the primary's last 300 ms (as in `failover.rs`, where it is also
/// frozen): what the primary writes then is lost, not left in a socket buffer for the
/// replica to read after the kill. With `WAIT 1` after each grant and each `DONE`, no
/// confirmed run is repeated, runs never overlap and stay in fence order, and every
/// duplicate's result is one its run stored. What the recipe cannot cover: a duplicate
/// answered a result on the old primary before its `DONE` reached the replica (a replay
/// writes nothing, so a `WAIT` after it confirms nothing), a result the promotion then
/// loses, so the run is retried. Such contradicted answers are counted and reported,
/// not failed: docs/reliability.md states the limit.
#[test]
fn runs_once_through_a_failover_with_wait_after_grant_and_done() {
    let (mut primary, replica, link) = replicated_through_a_proxy();
    let claims = Claims {
        moving_keys_ms: Some(60),
        confirm_with_wait: true,
    };
    let (history, tally) = run_scenario(primary.port, claims, |target| {
        link.cut();
        kill_primary_and_promote(&mut primary, &replica, &[], || {});
        target.move_to(replica.port);
    });
    let mut anomalies = once_history::one_success_per_keep(&history, KEEP_MS);
    anomalies.extend(once_history::replays_match_their_run(&history));
    anomalies.extend(once_history::runs_in_order_one_at_a_time(&history));
    let contradicted = once_history::replayed_results_kept(&history, KEEP_MS);
    let confirmed_runs = history.runs.len();
    Summary {
        scenario: "run once, failover after kill -9",
        fault: "replication cut and replica frozen 300 ms, primary SIGKILL, REPLICAOF NO ONE"
            .into(),
        load: format!(
            "{CLIENTS} clients, a window of 4 keys moving every 60 ms (half the claims to older keys), ttl {TTL_MS} ms, \
             keep {KEEP_MS} ms, BLOCK; WAIT 1 after each grant and each DONE"
        ),
        ops: confirmed_runs + history.replays.len(),
        anomalies: anomalies.len(),
        notes: format!(
            "{confirmed_runs} confirmed runs, {} replays; {} grants and {} DONEs not \
             confirmed by WAIT; duplicates' answers the failover contradicted: {}",
            history.replays.len(),
            tally.unconfirmed_grants.load(Ordering::Relaxed),
            tally.unconfirmed_done.load(Ordering::Relaxed),
            contradicted.len()
        ),
    }
    .emit();
    for line in &contradicted {
        println!("contradicted: {line}");
    }
    assert_none("run once across a failover", &anomalies);
    assert_exercised(&history);
}

/// The limit of the recipe, shown step by step: a run confirmed by `WAIT 1` stores its
/// result while the replication link is cut (its `WAIT` after `DONE` says 0 replicas);
/// a duplicate is answered that result on the primary, and its own `WAIT 1` says 1 at
/// once on Redis 7.2+ and Valkey, since a replay writes nothing for a replica to
/// acknowledge (Redis 7.0's `WAIT` does wait for the `DONE` there). The primary dies,
/// the replica is promoted with the run still running: once its lease ends, a claim is
/// granted a new run, contradicting what the duplicate was told.
#[test]
fn a_duplicate_answered_before_done_reached_the_replica_is_contradicted_after_failover() {
    // A lease long enough for the steps between the grant and the `DONE` on a busy
    // machine (the scenario's 300 ms could end before the `DONE`), after a replica
    // known to be in sync (its first sync through the proxy may still be under way).
    const LEASE_MS: i64 = 3_000;
    let (mut primary, replica, link) = replicated_through_a_proxy();
    let mut runner = primary.connect();
    let _: () = cmd("SET").arg("synced").arg(1).query(&mut runner).unwrap();
    let in_sync: i64 = cmd("WAIT").arg(1).arg(30_000).query(&mut runner).unwrap();
    assert_eq!(in_sync, 1, "the replica finished its first sync");
    let grant = once_claim(&mut runner, "order", LEASE_MS, KEEP_MS, &[]);
    let Value::Array(items) = grant else {
        panic!("a grant: {grant:?}")
    };
    let [Value::BulkString(token), Value::Int(fence)] = items.as_slice() else {
        panic!("a grant: {items:?}")
    };
    let reached: i64 = cmd("WAIT").arg(1).arg(30_000).query(&mut runner).unwrap();
    assert_eq!(reached, 1, "the grant reached the replica");
    link.cut();
    let stored: i64 = cmd("LOCK.DONE")
        .arg("order")
        .arg(token.as_slice())
        .arg("paid")
        .query(&mut runner)
        .unwrap();
    assert_eq!(stored, 1);
    assert!(!replicated(&mut runner), "DONE cannot reach the replica");
    let mut duplicate = primary.connect();
    let replay = once_claim(&mut duplicate, "order", LEASE_MS, KEEP_MS, &[]);
    assert_eq!(
        replay,
        Value::Array(vec![
            Value::Nil,
            Value::Int(*fence),
            Value::BulkString(b"paid".to_vec())
        ])
    );
    // Since Redis 7.2 (and in Valkey) `WAIT` waits for the connection's last write that
    // propagated something, and a replay propagates nothing: it answers 1 at once.
    // Redis 7.0 waits for everything the server wrote before the connection's last
    // command, the `DONE` included: 0 here.
    let version = info_field(&mut duplicate, "server", "redis_version").unwrap_or_default();
    let before_7_2 = version.starts_with("7.0.") || version.starts_with("7.1.");
    assert_eq!(
        replicated(&mut duplicate),
        !before_7_2,
        "WAIT 1 after a replay on {version}"
    );
    kill_primary_and_promote(&mut primary, &replica, &[], || {});
    let mut promoted = replica.connect();
    let again = once_claim(
        &mut promoted,
        "order",
        LEASE_MS,
        KEEP_MS,
        &["BLOCK", "30000"],
    );
    let Value::Array(items) = again else {
        panic!("a new run: {again:?}")
    };
    assert!(
        matches!(items.as_slice(), [Value::BulkString(_), Value::Int(next)] if next > fence),
        "the promoted replica ran the operation again: {items:?}"
    );
}
