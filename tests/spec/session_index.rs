//! What a session leaves behind and what bounds it: the index of sessions forgets a
//! shared holder's session when it leaves (memory and `fencelock_sessions` come back,
//! for shared and exclusive sessions), one `LOCK.KEEPALIVE` of thousands of shared
//! holdings stays fast on every server, a session acquired under a larger
//! `fencelock.max-token-length` can still be kept alive, listed and closed, and a
//! script that releases and closes never hands out a grant it took back.

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
    round(con, 0);
    let before = used_memory(con);
    for n in 1..4 {
        round(con, n);
    }
    assert_eq!(sessions_gauge(con), 0);
    used_memory(con) - before
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
