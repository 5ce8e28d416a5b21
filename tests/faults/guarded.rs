//! The failure fences exist for: a holder that stalls past its lease (GC pause, VM
//! freeze) and then writes. A stock counter updated by many workers under one lock with
//! short leases, some workers frozen past their lease before writing: through
//! `LOCK.GUARD` the final count equals the acknowledged updates, every time; the same
//! run writing without the guard loses updates (so the check can fail). And
//! `LOCK.FENCED` behind a Redlock over three servers refuses a holder whose majority
//! lapsed once a newer holder has written.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use testkit::*;

use crate::reliability::scale::seconds;

/// How a worker writes the count it read.
#[derive(Clone, Copy)]
enum Write {
    Guarded,
    Unchecked,
}

/// Runs the workers; returns (final count, acknowledged updates, stale writes refused).
fn stock_run(write: Write) -> (i64, i64, i64) {
    let server = Server::start();
    let mut admin = server.connect();
    let _: () = cmd("SET").arg("stock").arg(0).query(&mut admin).unwrap();
    let acknowledged = Arc::new(AtomicI64::new(0));
    let refused = Arc::new(AtomicI64::new(0));
    let until = Instant::now() + seconds(3, 30);
    let workers: Vec<_> = (0..10)
        .map(|id| {
            let mut con = server.connect();
            let (acknowledged, refused) = (acknowledged.clone(), refused.clone());
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(0x5_70c4 + id);
                while Instant::now() < until {
                    let grant: Option<(String, i64)> = cmd("LOCK.ACQUIRE")
                        .arg("lock:stock")
                        .arg(40)
                        .arg("BLOCK")
                        .arg(1_000)
                        .query(&mut con)
                        .unwrap();
                    let Some((token, _)) = grant else { continue };
                    let seen: i64 = cmd("GET").arg("stock").query(&mut con).unwrap();
                    if rng.gen_bool(0.2) {
                        // Frozen past the lease, as in a GC pause.
                        thread::sleep(Duration::from_millis(rng.gen_range(60..120)));
                    }
                    let written: redis::RedisResult<String> = match write {
                        Write::Guarded => cmd("LOCK.GUARD")
                            .arg("lock:stock")
                            .arg(&token)
                            .arg("SET")
                            .arg("stock")
                            .arg(seen + 1)
                            .query(&mut con),
                        Write::Unchecked => cmd("SET").arg("stock").arg(seen + 1).query(&mut con),
                    };
                    match written {
                        Ok(_) => acknowledged.fetch_add(1, Ordering::Relaxed),
                        Err(error) => {
                            assert_eq!(error.code(), Some("NOTHELD"), "{error:?}");
                            refused.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                    let _: i64 = cmd("LOCK.RELEASE")
                        .arg("lock:stock")
                        .arg(&token)
                        .query(&mut con)
                        .unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    let count: i64 = cmd("GET").arg("stock").query(&mut admin).unwrap();
    (
        count,
        acknowledged.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    )
}

#[test]
fn guarded_updates_are_never_lost_and_unchecked_ones_are() {
    let (count, acknowledged, refused) = stock_run(Write::Guarded);
    assert_eq!(
        count, acknowledged,
        "every acknowledged guarded update counted"
    );
    assert!(
        refused > 0,
        "no frozen holder was refused: the run proved nothing"
    );
    let (count, acknowledged, _) = stock_run(Write::Unchecked);
    assert!(
        count < acknowledged,
        "the control run should lose updates ({count} of {acknowledged})"
    );
}

/// A Redlock grant: the same token on a majority of three servers, and the highest fence
/// among them (fences follow each server's clock, so a later grant's is higher).
fn redlock(servers: &mut [Connection], token: &str, ttl_ms: i64) -> Option<i64> {
    let fences: Vec<i64> = servers
        .iter_mut()
        .filter_map(|con| acquire(con, "lock:res", ttl_ms, &["TOKEN", token]).map(|(_, f)| f))
        .collect();
    (fences.len() * 2 > servers.len()).then(|| fences.into_iter().max().unwrap_or(0))
}

#[test]
fn a_fence_mark_refuses_a_redlock_holder_whose_majority_lapsed() {
    let lock_servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let mut locks: Vec<Connection> = lock_servers.iter().map(Server::connect).collect();
    let resource = Server::start();
    let mut storage = resource.connect();
    let fenced_set =
        |con: &mut Connection, fence: i64, value: &str| -> redis::RedisResult<String> {
            cmd("LOCK.FENCED")
                .arg("mark:res")
                .arg(fence)
                .arg("SET")
                .arg("res")
                .arg(value)
                .query(con)
        };
    let first = redlock(&mut locks, "a", 100).expect("a holds a majority");
    assert_eq!(fenced_set(&mut storage, first, "a1").unwrap(), "OK");
    // a stalls past its lease; b takes the lock and writes.
    thread::sleep(Duration::from_millis(150));
    let second = redlock(&mut locks, "b", 10_000).expect("b holds a majority");
    assert!(second > first);
    assert_eq!(fenced_set(&mut storage, second, "b1").unwrap(), "OK");
    // a wakes up and writes with its old fence: refused.
    let stale = fenced_set(&mut storage, first, "a2").expect_err("a's majority lapsed");
    assert_eq!(stale.code(), Some("STALE"));
    let value: String = cmd("GET").arg("res").query(&mut storage).unwrap();
    assert_eq!(value, "b1");
}
