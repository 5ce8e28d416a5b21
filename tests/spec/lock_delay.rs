//! Lock-delay (the quarantine after a lease runs out) against what else can move a
//! key's expiry: a `PEXPIRE` or `PERSIST` of a quarantined lock never brings the ended
//! lease back, a live lease is moved only by its holder, a lease whose key cannot
//! outlast it by the delay is refused, a `LOCK.KEEPALIVE` that would overflow the
//! delay changes nothing, and a permanent key with a delay survives an AOF rewrite
//! without the RDB preamble.

use std::thread;
use std::time::Duration;

use redis::{cmd, Connection};
use testkit::resp::RawClient;
use testkit::*;

fn info_text(con: &mut Connection, key: &str, field: &str) -> Option<String> {
    let pairs: Vec<redis::Value> = cmd("LOCK.INFO").arg(key).query(con).unwrap_or_default();
    pairs.chunks(2).find_map(|pair| match pair {
        [redis::Value::SimpleString(name), value] if name == field => match value {
            redis::Value::SimpleString(text) => Some(text.clone()),
            redis::Value::Int(n) => Some(n.to_string()),
            _ => None,
        },
        _ => None,
    })
}

#[test]
fn a_quarantined_lock_stays_quarantined_whatever_its_expiry_is_set_to() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, fence) = acquire(
        &mut con,
        "lock:q",
        100,
        &["TOKEN", "h", "LOCKDELAY", "5000", "SESSION", "s"],
    )
    .unwrap();
    assert_eq!(token, "h");
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        info_text(&mut con, "lock:q", "mode").as_deref(),
        Some("quarantined")
    );
    for change in [&["PEXPIRE", "lock:q", "60000"][..], &["PERSIST", "lock:q"]] {
        assert_eq!(int(&mut con, change), 1, "{change:?}");
        assert_eq!(
            info_text(&mut con, "lock:q", "mode").as_deref(),
            Some("quarantined"),
            "after {change:?}"
        );
        assert_eq!(int(&mut con, &["LOCK.REFRESH", "lock:q", "h", "10000"]), 0);
        assert_eq!(fence_of(&mut con, "lock:q", "h"), None);
        assert_eq!(int(&mut con, &["LOCK.KEEPALIVE", "s", "10000"]), 0);
        assert_eq!(acquire(&mut con, "lock:q", 1_000, &[]), None);
    }
    // Only DEL ends it; the next grant's fence is above the ended one.
    assert_eq!(int(&mut con, &["DEL", "lock:q"]), 1);
    let (_, next) = acquire(&mut con, "lock:q", 1_000, &[]).unwrap();
    assert!(next > fence);
}

#[test]
fn a_live_lease_with_a_lock_delay_is_moved_only_by_its_holder() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(
        &mut con,
        "lock:l",
        300,
        &["TOKEN", "h", "LOCKDELAY", "2000"],
    )
    .unwrap();
    // A longer key expiry by hand lengthens the quarantine, not the lease.
    assert_eq!(int(&mut con, &["PEXPIRE", "lock:l", "60000"]), 1);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "lock:l", "h", "1000"]), 0);
    assert_eq!(
        info_text(&mut con, "lock:l", "mode").as_deref(),
        Some("quarantined")
    );
}

#[test]
fn a_lease_whose_key_cannot_outlast_it_by_the_delay_is_refused() {
    let server = Server::start();
    let mut con = server.connect();
    config_set(&mut con, "fencelock.max-ttl", &i64::MAX.to_string()).unwrap();
    let refused: redis::RedisResult<redis::Value> = cmd("LOCK.ACQUIRE")
        .arg("lock:o")
        .arg(100_000)
        .arg("LOCKDELAY")
        .arg(i64::MAX)
        .query(&mut con);
    let error = refused.expect_err("an overflowing lease and delay");
    assert!(
        error
            .to_string()
            .contains("invalid expire time in 'lock.acquire'"),
        "{error}"
    );
    assert_eq!(int(&mut con, &["EXISTS", "lock:o"]), 0);
    // A holding whose delay leaves room: a refresh that would overflow is refused too.
    acquire(
        &mut con,
        "lock:o",
        1_000,
        &["TOKEN", "t", "LOCKDELAY", "9223370000000000000"],
    )
    .expect("granted");
    let refresh: redis::RedisResult<i64> = cmd("LOCK.REFRESH")
        .arg("lock:o")
        .arg("t")
        .arg(10_000_000_000_000i64)
        .query(&mut con);
    assert!(refresh.is_err(), "{refresh:?}");
    assert!(fence_of(&mut con, "lock:o", "t").is_some(), "still held");
}

#[test]
fn a_keepalive_that_would_overflow_a_lock_delay_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    config_set(&mut con, "fencelock.max-ttl", &i64::MAX.to_string()).unwrap();
    acquire(
        &mut con,
        "lock:k4",
        100_000,
        &[
            "TOKEN",
            "t4",
            "LOCKDELAY",
            "9223370000000000000",
            "SESSION",
            "S4",
        ],
    )
    .unwrap();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(
        raw.call_str(&["LOCK.KEEPALIVE", "S4", "10000000000000"]),
        testkit::resp::err("ERR invalid expire time in 'lock.keepalive' command")
    );
    let listed = held(&mut con, "S4");
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0].pttl <= 100_000,
        "lease unchanged: {}",
        listed[0].pttl
    );
}

#[test]
fn a_permanent_key_with_a_lock_delay_survives_an_aof_rewrite_without_the_preamble() {
    let mut server = Server::with_args(&aof_always("no"));
    let mut con = server.connect();
    acquire(
        &mut con,
        "lock:qp",
        200,
        &["TOKEN", "a", "LOCKDELAY", "3000"],
    )
    .unwrap();
    acquire(
        &mut con,
        "lock:lp",
        2_000,
        &["TOKEN", "b", "LOCKDELAY", "3000", "SESSION", "S"],
    )
    .unwrap();
    thread::sleep(Duration::from_millis(300));
    assert_eq!(int(&mut con, &["PERSIST", "lock:qp"]), 1);
    assert_eq!(int(&mut con, &["PERSIST", "lock:lp"]), 1);
    // The lease still ends: LOCK.HELD says how much is left, never -1.
    let lease = held(&mut con, "S");
    assert_eq!(lease.len(), 1);
    assert!((0..=1_700).contains(&lease[0].pttl), "{}", lease[0].pttl);
    rewrite_aof(&mut con, Duration::from_secs(10));
    server.restart();
    let mut con = server.connect();
    for key in ["lock:qp", "lock:lp"] {
        assert_eq!(
            int(&mut con, &["PTTL", key]),
            -1,
            "{key} still has no expiry"
        );
    }
    assert_eq!(
        info_text(&mut con, "lock:qp", "mode").as_deref(),
        Some("quarantined")
    );
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "lock:qp", "a", "1000"]), 0);
    assert!(
        fence_of(&mut con, "lock:lp", "b").is_some(),
        "lp still held"
    );
}
