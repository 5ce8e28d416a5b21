//! Defects an attack from outside found in sessions and lock-delay, each kept as the
//! behaviour a user relies on: the index of sessions forgets a shared holder's session
//! when it leaves (memory and `fencelock_sessions` come back), a `PEXPIRE` or `PERSIST`
//! of a quarantined lock never brings the ended lease back, one `LOCK.KEEPALIVE` of
//! thousands of shared holdings stays fast on every server, and a session acquired under
//! a larger `fencelock.max-token-length` can still be kept alive, listed and closed.

use std::thread;
use std::time::{Duration, Instant};

use redis::{cmd, Connection};
use testkit::resp::RawClient;
use testkit::*;

fn sessions_gauge(con: &mut Connection) -> i64 {
    info_field(con, "fencelock", "fencelock_sessions")
        .and_then(|value| value.parse().ok())
        .expect("fencelock_sessions")
}

/// How much `used_memory` grew over three rounds of `round`, after a first round that
/// grows Redis's own tables (which stay grown); every session must be gone after each.
fn memory_grown_over_rounds(con: &mut Connection, round: impl Fn(&mut Connection, usize)) -> i64 {
    let used = |con: &mut Connection| -> i64 {
        info_field(con, "memory", "used_memory")
            .and_then(|value| value.parse().ok())
            .expect("used_memory")
    };
    round(con, 0);
    let before = used(con);
    for n in 1..4 {
        round(con, n);
    }
    assert_eq!(sessions_gauge(con), 0);
    used(con) - before
}

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
fn a_shared_holder_leaving_takes_its_session_out_of_the_index() {
    let server = Server::start();
    let mut con = server.connect();
    // Released, closed, and run out beside another holder that stays.
    acquire(
        &mut con,
        "rw:a",
        30_000,
        &["SHARED", "SESSION", "s1", "TOKEN", "a"],
    )
    .unwrap();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "rw:a", "a"]), 1);
    acquire(&mut con, "rw:b", 30_000, &["LIMIT", "3", "SESSION", "s2"]).unwrap();
    assert_eq!(int(&mut con, &["LOCK.CLOSE", "s2"]), 1);
    acquire(&mut con, "rw:c", 60_000, &["SHARED", "TOKEN", "stays"]).unwrap();
    acquire(&mut con, "rw:c", 50, &["SHARED", "SESSION", "s3"]).unwrap();
    // Two holdings of one session on one key: the first leaving keeps the session there.
    acquire(
        &mut con,
        "rw:d",
        30_000,
        &["SHARED", "SESSION", "s4", "TOKEN", "d1"],
    )
    .unwrap();
    acquire(
        &mut con,
        "rw:d",
        30_000,
        &["SHARED", "SESSION", "s4", "TOKEN", "d2"],
    )
    .unwrap();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "rw:d", "d1"]), 1);
    thread::sleep(Duration::from_millis(150));
    // The lease end is dropped by the next write of the lock.
    acquire(&mut con, "rw:c", 60_000, &["SHARED", "TOKEN", "stays"]).unwrap();
    assert_eq!(sessions_gauge(&mut con), 1, "only s4 holds something");
    assert_eq!(held(&mut con, "s4").len(), 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "rw:d", "d2"]), 1);
    assert_eq!(sessions_gauge(&mut con), 0);
}

#[test]
fn memory_comes_back_after_many_short_shared_sessions() {
    let server = Server::start();
    let mut con = server.connect();
    let grown = memory_grown_over_rounds(&mut con, |con, round| {
        let mut pipe = redis::pipe();
        for i in 0..5_000 {
            let session = format!("r{round}-{i}");
            pipe.cmd("LOCK.ACQUIRE")
                .arg(format!("rw:{}", i % 100))
                .arg(30_000)
                .arg("SHARED")
                .arg("SESSION")
                .arg(&session)
                .ignore();
            pipe.cmd("LOCK.CLOSE").arg(&session).ignore();
        }
        let _: () = pipe.query(con).unwrap();
    });
    // 15,000 leftover sessions would be over 3 MB; Redis's own tables move by a few
    // hundred kB from run to run.
    assert!(grown < 1_000_000, "used_memory grew by {grown} B");
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
fn one_keepalive_of_ten_thousand_shared_holdings_stays_fast() {
    let server = Server::start();
    let mut con = server.connect();
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("rw:{i}"))
            .arg(600_000)
            .arg("SHARED")
            .arg("SESSION")
            .arg("big")
            .arg("TOKEN")
            .arg("t")
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    // Tens of ms here; one timer per lock at one millisecond took seconds on Redis
    // 7.2 and later (each inserted one slot further than the last), in every call. The
    // least of three: a busy machine can stall one call, hardly all of them.
    let took = (0..3)
        .map(|_| {
            let started = Instant::now();
            assert_eq!(int(&mut con, &["LOCK.KEEPALIVE", "big", "700000"]), 10_000);
            started.elapsed()
        })
        .min()
        .expect("three calls");
    assert!(
        took < Duration::from_millis(1_500),
        "KEEPALIVE took {took:?}"
    );
}

#[test]
fn a_session_over_a_lowered_length_limit_is_still_kept_listed_and_closed() {
    let server = Server::start();
    let mut con = server.connect();
    let session = "s".repeat(300);
    let token = "t".repeat(300);
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-token-length")
        .arg(4096)
        .query(&mut con)
        .unwrap();
    acquire(
        &mut con,
        "lock:long",
        30_000,
        &["SESSION", &session, "TOKEN", &token],
    )
    .unwrap();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-token-length")
        .arg(10)
        .query(&mut con)
        .unwrap();
    assert_eq!(keepalive(&mut con, &session, 40_000), 1);
    assert_eq!(held(&mut con, &session).len(), 1);
    // A same-token retry renews; a new grant under the long session is refused.
    assert!(acquire(
        &mut con,
        "lock:long",
        30_000,
        &["SESSION", &session, "TOKEN", &token]
    )
    .is_some());
    let refused: redis::RedisResult<redis::Value> = cmd("LOCK.ACQUIRE")
        .arg("lock:other")
        .arg(1_000)
        .arg("SESSION")
        .arg(&session)
        .query(&mut con);
    let error = refused.expect_err("a new grant with the long session");
    assert!(error.to_string().contains("invalid session"), "{error}");
    assert_eq!(int(&mut con, &["LOCK.CLOSE", &session]), 1);
    assert_eq!(int(&mut con, &["EXISTS", "lock:long"]), 0);
}

#[test]
fn memory_comes_back_after_many_exclusive_sessions() {
    let server = Server::start();
    let mut con = server.connect();
    let grown = memory_grown_over_rounds(&mut con, |con, round| {
        let mut pipe = redis::pipe();
        for i in 0..20_000 {
            pipe.cmd("LOCK.ACQUIRE")
                .arg(format!("lock:{i}"))
                .arg(30_000)
                .arg("SESSION")
                .arg(format!("x{round}-{i}"))
                .ignore();
        }
        for i in 0..20_000 {
            pipe.cmd("LOCK.CLOSE").arg(format!("x{round}-{i}")).ignore();
        }
        let _: () = pipe.query(con).unwrap();
    });
    // A table of 20,000 sessions left at its peak is 2 MB; Redis's own tables move
    // by a few hundred kB from run to run.
    assert!(grown < 1_200_000, "used_memory grew by {grown} B");
}

#[test]
fn a_lease_whose_key_cannot_outlast_it_by_the_delay_is_refused() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-ttl")
        .arg(i64::MAX)
        .query(&mut con)
        .unwrap();
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
fn close_needs_permission_for_the_keys_its_session_waits_for() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "other:x", 30_000, &["TOKEN", "owner"]).unwrap();
    let mut waiter = RawClient::connect(server.port);
    waiter.send_pipeline(&[&[
        "LOCK.ACQUIRE",
        "other:x",
        "30000",
        "SESSION",
        "s",
        "BLOCK",
        "0",
    ]]);
    wait_for_waiters(&mut con, "other:x", 1);
    let _: () = cmd("ACL")
        .arg(&["SETUSER", "locks", "on", "nopass", "+@all", "~lock:*"])
        .query(&mut con)
        .unwrap();
    let mut limited = RawClient::connect(server.port);
    assert!(limited.call_str(&["AUTH", "locks", "x"]).is_ok());
    assert_eq!(
        limited.call_str(&["LOCK.CLOSE", "s"]),
        testkit::resp::err("NOPERM User locks has no permissions to access the 'other:x' key"),
        "the wait is on a key the user may not touch"
    );
    assert_eq!(waiters(&mut con, "other:x"), 1, "still waiting");
    assert_eq!(int(&mut con, &["LOCK.CLOSE", "s"]), 0);
    assert!(
        waiter.read_reply().is_nil(),
        "answered nil by the permitted close"
    );
}

#[test]
fn a_script_that_releases_and_closes_never_hands_out_a_grant_it_took_back() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "lock:p", 30_000, &["TOKEN", "hp", "SESSION", "H"]).unwrap();
    let mut first = RawClient::connect(server.port);
    first.send_pipeline(&[&[
        "LOCK.ACQUIRE",
        "lock:p",
        "30000",
        "TOKEN",
        "w1",
        "SESSION",
        "S",
        "BLOCK",
        "5000",
    ]]);
    wait_for_waiters(&mut con, "lock:p", 1);
    let mut second = RawClient::connect(server.port);
    second.send_pipeline(&[&[
        "LOCK.ACQUIRE",
        "lock:p",
        "30000",
        "TOKEN",
        "w2",
        "BLOCK",
        "5000",
    ]]);
    wait_for_waiters(&mut con, "lock:p", 2);
    let closed: Vec<i64> = cmd("EVAL")
        .arg("return {redis.call('LOCK.CLOSE','H'), redis.call('LOCK.CLOSE','S')}")
        .arg(0)
        .query(&mut con)
        .unwrap();
    // As in MULTI: the handoff waits for the end of the script, so S's wait is ended.
    assert_eq!(closed, vec![1, 0]);
    assert!(first.read_reply().is_nil(), "the closed session's wait");
    let (token, _) = second
        .read_reply()
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .expect("w2");
    assert_eq!(token, b"w2");
    assert!(fence_of(&mut con, "lock:p", "w2").is_some());
}

#[test]
fn a_session_command_needs_the_keyed_commands_permission_in_one_selector() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(
        &mut con,
        "other:b",
        30_000,
        &["TOKEN", "tb", "SESSION", "S"],
    )
    .unwrap();
    // The root allows the lock commands on lock:*; a selector allows only GET on other:*.
    let _: () = cmd("ACL")
        .arg(&[
            "SETUSER",
            "sel",
            "on",
            "nopass",
            "-@all",
            "+lock.acquire",
            "+lock.release",
            "+lock.refresh",
            "+lock.info",
            "+lock.close",
            "+lock.keepalive",
            "+lock.held",
            "~lock:*",
            "(+get ~other:*)",
        ])
        .query(&mut con)
        .unwrap();
    let mut sel = RawClient::connect(server.port);
    assert!(sel.call_str(&["AUTH", "sel", "x"]).is_ok());
    let refused =
        testkit::resp::err("NOPERM User sel has no permissions to access the 'other:b' key");
    let before = int(&mut con, &["PTTL", "other:b"]);
    for command in [
        &["LOCK.KEEPALIVE", "S", "999999"][..],
        &["LOCK.CLOSE", "S"],
        &["LOCK.HELD", "S"],
    ] {
        assert_eq!(sel.call_str(command), refused, "{command:?}");
    }
    assert!(
        int(&mut con, &["PTTL", "other:b"]) <= before,
        "not kept alive"
    );
    assert!(fence_of(&mut con, "other:b", "tb").is_some());
}

#[test]
fn a_keepalive_that_would_overflow_a_lock_delay_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-ttl")
        .arg(i64::MAX)
        .query(&mut con)
        .unwrap();
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
