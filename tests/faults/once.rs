//! Run once under faults: clients claim a few keys over and over (`LOCK.ONCE … BLOCK`);
//! a run stores its result, or its client crashes mid-work (its connection dropped, its
//! lease left to run out), or gives it up; midway the server is killed (`kill -9`) and
//! restarted from its AOF. The history is then judged (`reliability::once_history`): at
//! most one successful run per keep window, every duplicate answered with that run's
//! result, runs ordered by fence and never two at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use testkit::*;

use crate::reliability::history::now_us;
use crate::reliability::once_history::{all_anomalies, OnceHistory, Replay, Run, RunEnd};

const CLIENTS: usize = 8;
const KEYS: usize = 6;
const TTL_MS: i64 = 300;
/// Longer than the scenario: a stored result answers every later claim of its key.
const KEEP_MS: i64 = 120_000;

/// A connection to `server`'s port, retried while it restarts.
fn connect(url: &str) -> Option<Connection> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let connected = redis::Client::open(url)
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(5)));
        if let Ok(con) = connected {
            let _ = con.set_read_timeout(Some(Duration::from_secs(5)));
            return Some(con);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// One client's loop until `stop`: each claim recorded in `history`.
fn client(id: usize, url: &str, stop: &AtomicBool, history: &Mutex<OnceHistory>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(id as u64 ^ now_us() as u64);
    let Some(mut con) = connect(url) else { return };
    let mut first_run = true;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("order:{}", rng.gen_range(0..KEYS));
        let claimed_us = now_us();
        let reply: redis::RedisResult<Value> = cmd("LOCK.ONCE")
            .arg(&key)
            .arg(TTL_MS)
            .arg("KEEP")
            .arg(KEEP_MS)
            .arg("BLOCK")
            .arg(1_000)
            .query(&mut con);
        let answered_us = now_us();
        let items = match reply {
            Ok(Value::Array(items)) => items,
            Ok(_) => continue,
            Err(_) => {
                // The server went away: whatever the claim did is unknown, and a run it
                // may have been granted ends with its lease.
                match connect(url) {
                    Some(again) => con = again,
                    None => return,
                }
                continue;
            }
        };
        match items.as_slice() {
            [Value::Nil, Value::Int(fence), Value::BulkString(result)] => {
                history.lock().unwrap().replays.push(Replay {
                    client: id,
                    key,
                    fence: *fence,
                    result: String::from_utf8_lossy(result).into_owned(),
                    answered_us,
                });
            }
            [Value::BulkString(token), Value::Int(fence)] => {
                let token = String::from_utf8_lossy(token).into_owned();
                let end = finish(&mut con, &mut rng, (id, &key, &token, *fence), first_run);
                first_run = false;
                if matches!(end, RunEnd::Unknown { .. }) {
                    match connect(url) {
                        Some(again) => con = again,
                        None => return,
                    }
                }
                history.lock().unwrap().runs.push(Run {
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
                Ok(1) => RunEnd::Stored { sent_us, result },
                Ok(_) => RunEnd::Refused,
                Err(_) => RunEnd::Unknown {
                    result: Some(result),
                },
            }
        }
    }
}

#[test]
fn runs_once_through_crashed_holders_and_a_server_restart() {
    let mut server = Server::with_args(&aof_always("yes"));
    let url = server.url();
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(OnceHistory::default()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (url, stop, history) = (url.clone(), Arc::clone(&stop), Arc::clone(&history));
            std::thread::spawn(move || client(id, &url, &stop, &history))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_500));
    server.kill();
    server.restart();
    std::thread::sleep(Duration::from_millis(1_500));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let history = history.lock().unwrap().clone();
    let anomalies = all_anomalies(&history, KEEP_MS);
    assert!(anomalies.is_empty(), "{anomalies:#?}");
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
