//! The floor module against a real redis-server (testkit's): the lock commands' replies,
//! expiry and type, errors, an RDB round trip, and — with fencelock loaded beside it —
//! that a held floorlock costs what a held fencelock costs (`MEMORY USAGE` and
//! `used_memory` per lock), which is what makes the floor rows comparable.
//!
//! The floor's `.so` is not built by `cargo test` (a cdylib): `make build` (or `cargo
//! build --release -p fencelock-floor`) first; a missing or stale build is refused
//! (`testkit::floor_module_path`). `FENCELOCK_FLOOR_MODULE` picks another build.

use std::path::PathBuf;
use std::time::Duration;

use testkit::{cmd, Connection, Options, Server, Value};

/// The built floor module (testkit's finder, shared with the benchmark).
fn floor_module() -> PathBuf {
    testkit::floor_module_path()
}

/// A server with the floor module alone.
fn floor_server() -> Server {
    Server::with_options(Options {
        module: Some(floor_module()),
        ..Options::default()
    })
}

/// A server with fencelock (testkit's build) and the floor module loaded together.
fn both_modules_server() -> Server {
    Server::with_options(Options {
        args: vec!["loadmodule".into(), floor_module().display().to_string()],
        ..Options::default()
    })
}

fn query(con: &mut Connection, args: &[&str]) -> redis::RedisResult<Value> {
    let (name, rest) = args.split_first().expect("a command");
    cmd(name).arg(rest).query(con)
}

fn int(con: &mut Connection, args: &[&str]) -> i64 {
    match query(con, args) {
        Ok(Value::Int(value)) => value,
        other => panic!("{args:?}: expected an integer, got {other:?}"),
    }
}

/// `FLOOR.ACQUIRE key ttl` → `Some((token, fence))`, `None` for nil; checks the shape.
fn floor_acquire(con: &mut Connection, key: &str, ttl: i64) -> Option<(String, i64)> {
    let ttl = ttl.to_string();
    match query(con, &["FLOOR.ACQUIRE", key, &ttl]) {
        Ok(Value::Nil) => None,
        Ok(Value::Array(items)) => match items.as_slice() {
            [Value::BulkString(token), Value::Int(fence)] => {
                let token = String::from_utf8(token.clone()).expect("an ASCII token");
                assert_eq!(token.len(), 32, "token {token}");
                assert!(
                    token
                        .bytes()
                        .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
                    "token {token} is lowercase hex"
                );
                assert!(*fence > 0, "fence {fence}");
                Some((token, *fence))
            }
            other => panic!("FLOOR.ACQUIRE: expected [token, fence], got {other:?}"),
        },
        other => panic!("FLOOR.ACQUIRE: expected [token, fence] or nil, got {other:?}"),
    }
}

fn error_text(result: redis::RedisResult<Value>) -> String {
    match result {
        Err(error) => error.to_string(),
        Ok(value) => panic!("expected an error, got {value:?}"),
    }
}

/// A valid token that holds nothing.
const STRANGER: &str = "00000000000000000000000000000000";

#[test]
fn acquire_refresh_release() {
    let server = floor_server();
    let mut con = server.connect();

    let (token, fence) = floor_acquire(&mut con, "lock:a", 30_000).expect("a free key");
    let pttl = int(&mut con, &["PTTL", "lock:a"]);
    assert!((29_000..=30_000).contains(&pttl), "PTTL {pttl}");
    let key_type = query(&mut con, &["TYPE", "lock:a"]).expect("TYPE");
    assert_eq!(key_type, Value::SimpleString("floorlock".into()));
    assert_eq!(floor_acquire(&mut con, "lock:a", 30_000), None, "held");

    for wrong in [STRANGER, "not-a-token", &token.to_uppercase(), &token[..31]] {
        assert_eq!(
            int(&mut con, &["FLOOR.REFRESH", "lock:a", wrong, "60000"]),
            0,
            "refresh with {wrong}"
        );
    }
    assert!(int(&mut con, &["PTTL", "lock:a"]) <= 30_000);
    assert_eq!(
        int(&mut con, &["FLOOR.REFRESH", "lock:a", &token, "90000"]),
        1
    );
    let pttl = int(&mut con, &["PTTL", "lock:a"]);
    assert!(
        (89_000..=90_000).contains(&pttl),
        "PTTL after refresh {pttl}"
    );
    assert_eq!(
        int(&mut con, &["FLOOR.REFRESH", "lock:free", &token, "1000"]),
        0,
        "refresh of a free key"
    );

    assert_eq!(int(&mut con, &["FLOOR.RELEASE", "lock:a", STRANGER]), 0);
    assert_eq!(int(&mut con, &["EXISTS", "lock:a"]), 1);
    assert_eq!(int(&mut con, &["FLOOR.RELEASE", "lock:a", &token]), 1);
    assert_eq!(int(&mut con, &["EXISTS", "lock:a"]), 0, "released");
    assert_eq!(
        int(&mut con, &["FLOOR.RELEASE", "lock:a", &token]),
        0,
        "twice"
    );

    let (again, second) = floor_acquire(&mut con, "lock:a", 30_000).expect("free again");
    assert_ne!(again, token, "a fresh token");
    let (_, third) = floor_acquire(&mut con, "lock:b", 30_000).expect("another key");
    assert!(
        fence < second && second < third,
        "fences {fence} {second} {third}"
    );
}

#[test]
fn a_lease_ends_with_the_key() {
    let server = floor_server();
    let mut con = server.connect();
    let (token, _) = floor_acquire(&mut con, "lock:short", 20).expect("a free key");
    testkit::eventually(
        std::time::Duration::from_secs(5),
        "the lease to end",
        || int(&mut con, &["EXISTS", "lock:short"]) == 0,
    );
    assert_eq!(int(&mut con, &["FLOOR.RELEASE", "lock:short", &token]), 0);
    assert!(floor_acquire(&mut con, "lock:short", 1_000).is_some());
}

#[test]
fn errors_are_replies_and_the_server_keeps_running() {
    let server = floor_server();
    let mut con = server.connect();
    for args in [
        &["FLOOR.ACQUIRE", "k"][..],
        &["FLOOR.ACQUIRE", "k", "1000", "extra"],
        &["FLOOR.RELEASE", "k"],
        &["FLOOR.RELEASE", "k", STRANGER, "extra"],
        &["FLOOR.REFRESH", "k", STRANGER],
    ] {
        let text = error_text(query(&mut con, args));
        assert!(
            text.contains("wrong number of arguments"),
            "{args:?}: {text}"
        );
    }
    for ttl in ["abc", "1.5", "", "99999999999999999999"] {
        let text = error_text(query(&mut con, &["FLOOR.ACQUIRE", "k", ttl]));
        assert!(text.contains("not an integer"), "ttl {ttl:?}: {text}");
    }
    for ttl in ["0", "-5", "2592000001"] {
        let text = error_text(query(&mut con, &["FLOOR.ACQUIRE", "k", ttl]));
        assert!(text.contains("invalid expire time"), "ttl {ttl:?}: {text}");
    }
    let (token, _) = floor_acquire(&mut con, "k", 30_000).expect("a free key");
    let text = error_text(query(&mut con, &["FLOOR.REFRESH", "k", &token, "x"]));
    assert!(text.contains("not an integer"), "{text}");
    let text = error_text(query(&mut con, &["FLOOR.RELEASE", "k", ""]));
    assert!(text.contains("invalid token"), "{text}");

    let _: () = cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut con)
        .expect("SET");
    for args in [
        &["FLOOR.ACQUIRE", "plain", "1000"][..],
        &["FLOOR.RELEASE", "plain", STRANGER],
        &["FLOOR.REFRESH", "plain", STRANGER, "1000"],
    ] {
        let text = error_text(query(&mut con, args));
        assert!(text.contains("WRONGTYPE"), "{args:?}: {text}");
    }
    assert_eq!(
        query(&mut con, &["PING"]).expect("PING"),
        Value::SimpleString("PONG".into())
    );
    assert_eq!(int(&mut con, &["FLOOR.RELEASE", "k", &token]), 1);
}

#[test]
fn a_held_lock_survives_an_rdb_round_trip() {
    let server = floor_server();
    let mut con = server.connect();
    let (token, fence) = floor_acquire(&mut con, "lock:kept", 60_000).expect("a free key");
    let _: () = cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut con)
        .expect("DEBUG RELOAD");
    let key_type = query(&mut con, &["TYPE", "lock:kept"]).expect("TYPE");
    assert_eq!(key_type, Value::SimpleString("floorlock".into()));
    assert!(int(&mut con, &["PTTL", "lock:kept"]) > 50_000);
    let (_, next) = floor_acquire(&mut con, "lock:other", 1_000).expect("a free key");
    assert!(next > fence, "fences keep rising: {fence} then {next}");
    assert_eq!(int(&mut con, &["FLOOR.RELEASE", "lock:kept", &token]), 1);
}

/// The point of the floor's layout: a held floorlock costs what a held fencelock costs.
#[test]
fn a_floorlock_costs_what_a_fencelock_costs() {
    let server = both_modules_server();
    let mut con = server.connect();
    let fencelock: Option<(String, i64)> = cmd("LOCK.ACQUIRE")
        .arg("lock:fence")
        .arg(30_000)
        .query(&mut con)
        .expect("LOCK.ACQUIRE");
    assert!(fencelock.is_some(), "fencelock granted");
    floor_acquire(&mut con, "lock:floor", 30_000).expect("floor granted");
    let usage =
        |con: &mut Connection, key: &str| int(con, &["MEMORY", "USAGE", key, "SAMPLES", "0"]);
    let (fence_usage, floor_usage) = (usage(&mut con, "lock:fence"), usage(&mut con, "lock:floor"));
    println!("MEMORY USAGE: fencelock {fence_usage} B, floorlock {floor_usage} B");
    assert!(
        (fence_usage - floor_usage).abs() <= 16,
        "fencelock {fence_usage} B vs floorlock {floor_usage} B"
    );

    // used_memory per lock, over many locks of each (same key lengths, same count):
    // measured once Redis has finished growing its tables (a rehash in progress holds
    // two), against the same connection idle after FLUSHALL.
    const LOCKS: usize = 20_000;
    let per_lock = |con: &mut Connection, command: &str| -> f64 {
        let mut pipe = redis::pipe();
        for n in 0..LOCKS {
            pipe.cmd(command)
                .arg(format!("lock:{n:08}"))
                .arg(60_000)
                .ignore();
        }
        let _: () = pipe.query(con).expect("acquire many");
        assert_eq!(
            int(con, &["DBSIZE"]),
            LOCKS as i64,
            "{command}: every lock held"
        );
        testkit::eventually(
            Duration::from_secs(10),
            "the keyspace rehash to end",
            || {
                let stats: String = cmd("DEBUG")
                    .arg("HTSTATS")
                    .arg(0)
                    .query(con)
                    .expect("HTSTATS");
                !stats.contains("rehashing target")
            },
        );
        let held = used_memory(con);
        let _: () = cmd("FLUSHALL").arg("SYNC").query(con).expect("FLUSHALL");
        (held - used_memory(con)) as f64 / LOCKS as f64
    };
    let _: () = cmd("FLUSHALL")
        .arg("SYNC")
        .query(&mut con)
        .expect("FLUSHALL");
    // The floor mirrors a lock, not LOCK.TOP's index of held keys (about 45 B a held
    // key, an observability cost of its own that `make bench`'s memory rows show with
    // it on): compared with the index off.
    let _: () = cmd("CONFIG")
        .arg(&["SET", "fencelock.track-held-keys", "no"][..])
        .query(&mut con)
        .expect("CONFIG SET");
    // The first round also pays for one-time growth (about 1 B per lock): not counted.
    per_lock(&mut con, "FLOOR.ACQUIRE");
    let fence_per_lock = per_lock(&mut con, "LOCK.ACQUIRE");
    let floor_per_lock = per_lock(&mut con, "FLOOR.ACQUIRE");
    println!(
        "used_memory per lock ({LOCKS} locks): fencelock {fence_per_lock:.1} B, floorlock {floor_per_lock:.1} B"
    );
    assert!(
        (fence_per_lock - floor_per_lock).abs() <= 16.0,
        "used_memory per lock: fencelock {fence_per_lock:.1} B vs floorlock {floor_per_lock:.1} B"
    );
}

fn used_memory(con: &mut Connection) -> i64 {
    testkit::info_field(con, "memory", "used_memory")
        .and_then(|value| value.parse().ok())
        .expect("used_memory")
}
