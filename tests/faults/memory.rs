//! Memory: the module allocates through Redis's allocator, so `used_memory` counts every
//! byte it holds; it must return to its baseline after 100,000 acquire/release cycles
//! and after 10,000 waiters time out. Under `make leakcheck` the server also runs under
//! valgrind through blocking, persistence and corrupt-payload paths, and its report
//! must show no leak and no invalid access in a stack through the module.

use std::time::{Duration, Instant};

use crate::reliability::report::{assert_none, Summary};
use crate::reliability::scale::pick;
use testkit::resp::{RawClient, Reply};
use testkit::*;

/// Acquires and releases `cycles` times over 100 keys, pipelined; a tenth of the
/// grants are refreshed first, so every write path runs.
fn churn(con: &mut Connection, cycles: usize) {
    let batch = 1_000;
    for start in (0..cycles).step_by(batch) {
        let mut acquire = redis::pipe();
        for i in start..start + batch {
            acquire
                .cmd("LOCK.ACQUIRE")
                .arg(format!("m:{}", i % 100))
                .arg(60_000);
        }
        let grants: Vec<Option<(String, i64)>> = acquire.query(con).unwrap();
        let mut release = redis::pipe();
        for (i, grant) in grants.iter().enumerate() {
            let key = format!("m:{}", (start + i) % 100);
            if let Some((token, _)) = grant {
                if i % 10 == 0 {
                    release
                        .cmd("LOCK.REFRESH")
                        .arg(&key)
                        .arg(token)
                        .arg(30_000)
                        .ignore();
                }
                release.cmd("LOCK.RELEASE").arg(&key).arg(token).ignore();
            }
        }
        let _: () = release.query(con).unwrap();
    }
}

#[test]
fn used_memory_returns_to_baseline_after_acquire_release_cycles() {
    let cycles = pick(100_000, 500_000);
    let server = Server::start();
    let mut con = server.connect();
    // Warm-up: the keyspace's tables and the allocator's size classes exist afterwards.
    churn(&mut con, 2_000);
    let baseline = used_memory(&mut con);
    churn(&mut con, cycles);
    let after = used_memory(&mut con);
    assert_eq!(int(&mut con, &["DBSIZE"]), 0);
    let grown = after - baseline;
    // A leak of even 8 bytes a cycle would be 800 KB.
    let anomalies: Vec<String> = (grown > 64 * 1024)
        .then(|| format!("used_memory grew by {grown} bytes over {cycles} cycles"))
        .into_iter()
        .collect();
    Summary {
        scenario: "memory, acquire/release",
        fault: "none (leak check)".into(),
        load: "pipelined acquire (+10% refresh) + release over 100 keys".into(),
        ops: cycles,
        anomalies: anomalies.len(),
        notes: format!("used_memory {baseline} -> {after} bytes ({grown:+})"),
    }
    .emit();
    assert_none("memory after cycles", &anomalies);
}

/// `used_memory` once it stops shrinking: Redis keeps each blocked client's reply
/// client in a pool of temporary clients that modulesCron trims a little per tick.
fn settled_memory(con: &mut Connection) -> (i64, Duration) {
    // Settled: three samples in a row that did not go down.
    let started = Instant::now();
    let mut last = used_memory(con);
    let mut steady = 0;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = used_memory(con);
        steady = if now >= last { steady + 1 } else { 0 };
        if steady == 3 || started.elapsed() > Duration::from_secs(60) {
            return (now, started.elapsed());
        }
        last = now;
    }
}

/// `LOCK.ACQUIRE` on the held key `w`, waiting 1.5 s.
const LOCK_WAIT: &[&[u8]] = &[b"LOCK.ACQUIRE", b"w", b"1000", b"BLOCK", b"1500"];
/// Redis's own blocking on an empty list, 1.5 s.
const LIST_WAIT: &[&[u8]] = &[b"BLPOP", b"empty", b"1.5"];

/// `waiters` clients send `wait` and block until their timeout; returns the anomalies
/// seen and how many were queued for the lock when sampled.
fn waiters_time_out(
    server: &Server,
    con: &mut Connection,
    waiters: usize,
    wait: &[&[u8]],
) -> (Vec<String>, String) {
    let mut clients: Vec<RawClient> = (0..waiters)
        .map(|_| {
            let mut raw = RawClient::connect(server.port);
            raw.send(wait);
            raw
        })
        .collect();
    let queued = info_field(con, "fencelock", "fencelock_waiters").unwrap_or_default();
    let mut anomalies = Vec::new();
    for raw in &mut clients {
        // Nil: a bulk from LOCK.ACQUIRE, an array from BLPOP.
        if !matches!(raw.read_reply(), Reply::Bulk(None) | Reply::Array(None)) {
            anomalies.push("a waiter got something else than nil on timeout".to_string());
        }
    }
    drop(clients);
    eventually(Duration::from_secs(10), "waiters disconnected", || {
        info_field(con, "clients", "connected_clients").as_deref() == Some("1")
    });
    if info_field(con, "fencelock", "fencelock_waiters").as_deref() != Some("0") {
        anomalies.push("waiters left registered".into());
    }
    (anomalies, queued)
}

#[test]
fn used_memory_returns_to_baseline_after_waiters_time_out() {
    // 10,000 under `make soak`; fewer in CI, where a busy machine slows Redis's trimming
    // of its client pool more than the waiters themselves cost.
    let waiters = pick(2_000, 10_000);
    // A faster cron trims Redis's temporary-client pool in seconds rather than a minute.
    let server = Server::with_args(&["maxclients", "10100", "hz", "100"]);
    let mut con = server.connect();
    acquire(&mut con, "w", 600_000, &[]).unwrap();
    // Some servers keep tables sized for the most clients they ever had (Redis 8.2:
    // ~40 KB after 2,000): as many clients blocked in Redis's own BLPOP size those
    // first. Then a small round of lock waiters, and one eight times as large must
    // return to the same bytes: the module's tables shrink once their waiters are gone
    // (as Redis's own dicts do), whatever size the queue reached.
    let (mut anomalies, _) = waiters_time_out(&server, &mut con, waiters, LIST_WAIT);
    let (more, _) = waiters_time_out(&server, &mut con, waiters / 8, LOCK_WAIT);
    anomalies.extend(more);
    let (baseline, _) = settled_memory(&mut con);
    let (more, queued) = waiters_time_out(&server, &mut con, waiters, LOCK_WAIT);
    anomalies.extend(more);
    let (after, settled_in) = settled_memory(&mut con);
    let grown = after - baseline;
    if grown > 16 * 1024 {
        anomalies.push(format!(
            "used_memory {grown} bytes above baseline after {waiters} more timeouts"
        ));
    }
    let timeouts = info_field(&mut con, "fencelock", "fencelock_block_timeouts");
    Summary {
        scenario: "memory, waiter timeouts",
        fault: "none (leak check)".into(),
        load: format!(
            "{waiters} clients in BLPOP, then {} and {waiters} clients blocked on one held key, until their timeout",
            waiters / 8
        ),
        ops: waiters / 8 + waiters,
        anomalies: anomalies.len(),
        notes: format!(
            "{queued} queued when sampled; timeouts counted {}; used_memory after round 1 {baseline}, after round 2 {after} ({grown:+}), settled in {} ms",
            timeouts.unwrap_or_default(),
            settled_in.as_millis()
        ),
    }
    .emit();
    assert_none("memory after waiter timeouts", &anomalies);
}

/// Blocking paths: handoffs on release and expiry, timeouts, disconnects, CLIENT UNBLOCK.
fn blocking_workout(server: &Server) {
    let mut con = server.connect();
    for round in 0..5 {
        let key = format!("b{round}");
        let (token, _) = acquire(&mut con, &key, 300, &[]).unwrap();
        let mut waiters: Vec<RawClient> = (0..6)
            .map(|i| {
                let mut raw = RawClient::connect(server.port);
                let timeout = if i == 5 { "50" } else { "20000" };
                raw.send(&[
                    b"LOCK.ACQUIRE",
                    key.as_bytes(),
                    b"200",
                    b"BLOCK",
                    timeout.as_bytes(),
                ]);
                raw
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        // One waiter leaves, one is unblocked by an admin, the holder releases.
        drop(waiters.remove(0));
        let ids: Vec<i64> = cmd("CLIENT")
            .arg("LIST")
            .query::<String>(&mut con)
            .unwrap()
            .lines()
            .filter(|line| line.contains("cmd=lock.acquire"))
            .filter_map(|line| {
                line.split_whitespace()
                    .next()?
                    .strip_prefix("id=")?
                    .parse()
                    .ok()
            })
            .collect();
        if let Some(id) = ids.first() {
            let _: i64 = cmd("CLIENT")
                .arg("UNBLOCK")
                .arg(*id)
                .query(&mut con)
                .unwrap();
        }
        assert_eq!(int(&mut con, &["LOCK.RELEASE", &key, &token]), 1);
        // The rest are served by release, then by expiry of each 200 ms lease.
        for raw in waiters.iter_mut().skip(1) {
            let _ = raw.read_reply();
        }
    }
}

/// Shared holders: leases ending on their own timers, shared and exclusive waiters,
/// a waiter refused `WRONGMODE` at its turn, handoffs deferred to the end of a
/// transaction, `LOCK.DROP`.
fn shared_workout(server: &Server) {
    let mut con = server.connect();
    let waiter = |key: &str, mode: &[&str]| {
        let mut raw = RawClient::connect(server.port);
        let mut argv: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", key.as_bytes(), b"200", b"BLOCK", b"8000"];
        argv.extend(mode.iter().map(|word| word.as_bytes()));
        raw.send(&argv);
        raw
    };
    // A full semaphore whose shortest lease ends by itself.
    acquire(&mut con, "sem", 1_500, &["LIMIT", "3"]).unwrap();
    let (long, _) = acquire(&mut con, "sem", 60_000, &["LIMIT", "3"]).unwrap();
    acquire(&mut con, "sem", 60_000, &["LIMIT", "3", "TOKEN", "third"]).unwrap();
    let mut waiters = vec![
        waiter("sem", &["LIMIT", "3"]),
        waiter("sem", &[]),
        waiter("sem", &["LIMIT", "3"]),
    ];
    wait_for_waiters(&mut con, "sem", 3);
    // An exclusive lock freed in a transaction: a semaphore of 2 takes it, and the
    // reader queued behind is refused WRONGMODE at its turn.
    acquire(&mut con, "rw", 60_000, &["TOKEN", "x"]).unwrap();
    waiters.push(waiter("rw", &["LIMIT", "2"]));
    wait_for_waiters(&mut con, "rw", 1);
    waiters.push(waiter("rw", &["SHARED"]));
    wait_for_waiters(&mut con, "rw", 2);
    let _: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("rw")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert!(
        waiters[0].read_reply().grant().is_some(),
        "a permit freed by its lease"
    );
    let _: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("sem")
        .arg(&long)
        .cmd("LOCK.DROP")
        .arg("sem")
        .arg("third")
        .query(&mut con)
        .unwrap();
    let replies: Vec<Reply> = waiters.iter_mut().skip(1).map(|w| w.read_reply()).collect();
    assert!(
        matches!(&replies[..], [Reply::Array(Some(_)), Reply::Array(Some(_)), Reply::Array(Some(_)), Reply::Error(refused)]
            if refused.starts_with("WRONGMODE")),
        "{replies:?}"
    );
}

/// Persistence paths: RDB save/load, AOF rewrite without preamble, corrupt payloads.
fn persistence_workout(server: &Server) {
    let mut con = server.connect();
    for i in 0..20 {
        acquire(
            &mut con,
            &format!("p{i}"),
            600_000,
            &["TOKEN", &"t".repeat(i + 1)],
        )
        .unwrap();
    }
    for mode in [&["SHARED"][..], &["LIMIT", "4"]] {
        for _ in 0..3 {
            acquire(&mut con, &format!("ps{}", mode.len()), 600_000, mode).unwrap();
        }
    }
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("aof-use-rdb-preamble")
        .arg("no")
        .query(&mut con)
        .unwrap();
    rewrite_aof(&mut con, Duration::from_secs(60));
    for dumped in ["p3", "ps2"] {
        let payload: Vec<u8> = cmd("DUMP").arg(dumped).query(&mut con).unwrap();
        for cut in 1..payload.len() {
            let _: redis::RedisResult<()> = cmd("RESTORE")
                .arg("cut")
                .arg(0)
                .arg(&payload[..cut])
                .query(&mut con);
        }
    }
}

#[test]
#[ignore = "needs FENCELOCK_REDIS_SERVER to run redis-server under valgrind: make leakcheck"]
fn valgrind_finds_no_module_leak_or_invalid_access() {
    let logs = std::env::var("FENCELOCK_VALGRIND_LOGS").expect("FENCELOCK_VALGRIND_LOGS");
    let mut server = Server::with_args(&["appendonly", "yes"]);
    let pid = server.pid().expect("running");
    blocking_workout(&server);
    shared_workout(&server);
    persistence_workout(&server);
    server.shutdown();
    let report =
        std::fs::read_to_string(format!("{logs}/valgrind-{pid}.log")).expect("valgrind log");
    assert!(
        report.contains("LEAK SUMMARY"),
        "valgrind did not finish:\n{report}"
    );
    // Records are separated by blank "==pid== " lines; keep those that pass through us.
    let anomalies: Vec<String> = report
        .split(&format!("=={pid}== \n"))
        .filter(|record| record.contains("fencelock"))
        // Redis's own lzf compressor reads its hash table uninitialised by design (Redis
        // ships a valgrind suppression for it); it shows up under our rdb_save.
        .filter(|record| !record.contains("lzf_compress"))
        .filter(|record| {
            record.contains("definitely lost")
                || record.contains("Invalid read")
                || record.contains("Invalid write")
                || record.contains("Invalid free")
                || record.contains("uninitialised")
        })
        .map(str::to_string)
        .collect();
    Summary {
        scenario: "valgrind",
        fault: "none (leak and memory-error check)".into(),
        load: "blocking (handoff, timeout, disconnect, CLIENT UNBLOCK), shared holders (own lease ends, WRONGMODE at a turn, handoff after a transaction, LOCK.DROP) and persistence (DEBUG RELOAD, AOF rewrite, truncated RESTORE) of exclusive and shared locks".into(),
        ops: 1,
        anomalies: anomalies.len(),
        notes: "valgrind memcheck records through libfencelock: 0 required".into(),
    }
    .emit();
    assert_none("valgrind", &anomalies);
}

/// `holders` grants of one shared lock `key` in `mode` (`SHARED` or `LIMIT n`),
/// pipelined; their tokens.
fn grant_shared(con: &mut Connection, key: &str, holders: usize, mode: &[&str]) -> Vec<String> {
    let mut pipe = redis::pipe();
    for _ in 0..holders {
        pipe.cmd("LOCK.ACQUIRE").arg(key).arg(60_000).arg(mode);
    }
    let grants: Vec<Option<(String, i64)>> = pipe.query(con).unwrap();
    grants
        .into_iter()
        .map(|grant| grant.expect("room for every holder").0)
        .collect()
}

#[test]
fn each_additional_shared_holder_costs_at_most_160_bytes() {
    let server = Server::start();
    let mut con = server.connect();
    let usage =
        |con: &mut Connection, key: &str| int(con, &["MEMORY", "USAGE", key, "SAMPLES", "0"]);
    for mode in [&["SHARED"][..], &["LIMIT", "5000"][..]] {
        let key = format!("mem:{}", mode[0]);
        grant_shared(&mut con, &key, 1, mode);
        let one = usage(&mut con, &key);
        // The token index is a table that doubles: 1,025 holders is its emptiest (a
        // holder's share of it is largest), 4,096 close to its fullest. A holder is
        // its holding, its place in the fence and the lease orders, and its index slot.
        grant_shared(&mut con, &key, 1_023, mode);
        let before = used_memory(&mut con);
        grant_shared(&mut con, &key, 1, mode);
        let reported = (usage(&mut con, &key) - one) / 1_024;
        assert!(
            reported <= 160,
            "{mode:?}: MEMORY USAGE {reported} B a holder at 1,025"
        );
        grant_shared(&mut con, &key, 3_071, mode);
        let reported = (usage(&mut con, &key) - one) / 4_095;
        assert!(
            reported <= 160,
            "{mode:?}: MEMORY USAGE {reported} B a holder at 4,096"
        );
        // What the server allocated for the holders from 1,025 to 4,096 (a doubling
        // of the index included).
        let allocated = (used_memory(&mut con) - before) / 3_072;
        eprintln!("{mode:?}: {reported} B a holder reported, {allocated} B allocated");
        assert!(
            allocated <= 160,
            "{mode:?}: used_memory grows {allocated} B a holder"
        );
    }
}

#[test]
fn used_memory_returns_to_baseline_after_shared_cycles() {
    let rounds = pick(200, 2_000);
    let server = Server::start();
    let mut con = server.connect();
    let cycle = |con: &mut Connection| {
        for (key, mode) in [("sem", &["LIMIT", "50"][..]), ("rw", &["SHARED"][..])] {
            let tokens = grant_shared(con, key, 50, mode);
            let mut release = redis::pipe();
            for (i, token) in tokens.iter().enumerate() {
                if i % 5 == 0 {
                    release
                        .cmd("LOCK.REFRESH")
                        .arg(key)
                        .arg(token)
                        .arg(30_000)
                        .ignore();
                }
                release.cmd("LOCK.RELEASE").arg(key).arg(token).ignore();
            }
            let _: () = release.query(con).unwrap();
        }
    };
    for _ in 0..20 {
        cycle(&mut con);
    }
    let baseline = used_memory(&mut con);
    for _ in 0..rounds {
        cycle(&mut con);
    }
    let grown = used_memory(&mut con) - baseline;
    assert_eq!(
        int(&mut con, &["DBSIZE"]),
        0,
        "no key left after the last holder"
    );
    assert!(
        grown <= 64 * 1024,
        "used_memory grew by {grown} bytes over {rounds} rounds of 100 holders"
    );
}

/// Mean bytes of `used_memory` each of `clients` (with their ids) adds once it is
/// blocked in `wait`; all are unblocked again before it returns.
fn blocked_cost(con: &mut Connection, clients: &mut [(RawClient, i64)], wait: &[&[u8]]) -> i64 {
    let blocked = |con: &mut Connection| -> i64 {
        info_field(con, "clients", "blocked_clients")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let before = used_memory(con);
    for (client, _) in clients.iter_mut() {
        client.send(wait);
    }
    let count = i64::try_from(clients.len()).unwrap();
    eventually(Duration::from_secs(30), "all blocked", || {
        blocked(con) == count
    });
    let cost = (used_memory(con) - before) / count;
    // All unblocked in one pipeline: the next round follows at once, before the
    // server's cron trims the pool of temporary clients (one round trip each took
    // seconds on a busy machine).
    let mut unblock = redis::pipe();
    for (_, id) in clients.iter() {
        unblock.cmd("CLIENT").arg("UNBLOCK").arg(*id);
    }
    let unblocked: Vec<i64> = unblock.query(con).expect("CLIENT UNBLOCK");
    assert!(unblocked.iter().all(|&n| n == 1), "{unblocked:?}");
    for (client, _) in clients.iter_mut() {
        assert!(client.read_reply().is_nil());
    }
    cost
}

/// What a waiter costs the server, and whose it is. Redis's blocked-client API gives
/// every client a module blocks two temporary clients with a 16 KB reply buffer each
/// (`RM_BlockClient`'s reply and thread-safe-context clients), about 33 KB, pooled when
/// the client is unblocked and freed 50 per server cron tick: no module can block a
/// client for less. The module's own part shows once that pool is full: a second round
/// of waiters, right after a first one left, must cost little more than `BLPOP`.
#[test]
fn a_waiter_costs_the_blocked_client_api_and_little_more() {
    const WAITERS: usize = 1_000;
    // hz 1: the pool is trimmed slowly enough to still be full for the second round.
    let server = Server::with_args(&["maxclients", "2100", "hz", "1"]);
    let mut con = server.connect();
    acquire(&mut con, "w", 600_000, &[]).unwrap();
    let mut clients: Vec<(RawClient, i64)> = (0..WAITERS)
        .map(|_| {
            let mut raw = RawClient::connect(server.port);
            let id = raw.call_str(&["CLIENT", "ID"]).integer().expect("id");
            (raw, id)
        })
        .collect();
    let list = blocked_cost(&mut con, &mut clients, &[b"BLPOP", b"empty", b"0"]);
    let lock_wait: &[&[u8]] = &[b"LOCK.ACQUIRE", b"w", b"1000", b"BLOCK", b"0"];
    let first = blocked_cost(&mut con, &mut clients, lock_wait);
    // The better of two pooled rounds: a cron tick that trims the pool between two
    // rounds (a busy machine stretches the gap) lands before one of them, hardly both.
    let pooled = (0..2)
        .map(|_| blocked_cost(&mut con, &mut clients, lock_wait))
        .min()
        .expect("two rounds");
    eprintln!("a waiter: BLPOP {list} B; LOCK.ACQUIRE BLOCK {first} B, {pooled} B with Redis's temporary clients pooled");
    assert!(first <= 40 * 1024, "{first} B a waiter");
    assert!(
        pooled - list <= 1024,
        "{pooled} B a waiter with pooled temporary clients, BLPOP {list} B"
    );
}
