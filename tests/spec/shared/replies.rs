//! What shared holders answer and announce: fences strictly increasing across holders and
//! modes; `LOCK.FENCE` per holder and the highest live one without a token; `LOCK.INFO`
//! fields in order, never tokens; keyspace events and the `fencelock_expired` count per
//! holder; and `LOCK.GUARD` running for any live shared holder's token.

use std::time::Duration;

use testkit::resp::{err, RawClient, Reply};
use testkit::*;

use super::{acquire_raw, assert_info, held_info, hold, next_events, refresh, release, Waiter};

const NOT_HELD: &str = "NOTHELD this token does not hold the lock";

#[test]
fn fences_increase_across_holders_and_modes() {
    let server = Server::start();
    let mut con = server.connect();
    let mut fences = Vec::new();
    let mut take = |con: &mut Connection, key: &str, token: &str, mode: &[&str]| {
        let mut extra = vec!["TOKEN", token];
        extra.extend_from_slice(mode);
        let (_, fence) = hold(con, key, 60_000, &extra);
        fences.push(fence);
    };
    take(&mut con, "k", "x1", &[]);
    assert_eq!(release(&mut con, "k", "x1"), 1);
    take(&mut con, "k", "r1", &["SHARED"]);
    take(&mut con, "k", "r2", &["SHARED"]);
    take(&mut con, "other", "s1", &["LIMIT", "2"]);
    take(&mut con, "k", "r3", &["SHARED"]);
    assert_eq!(int(&mut con, &["DEL", "k"]), 1);
    take(&mut con, "k", "s1", &["LIMIT", "5"]);
    take(&mut con, "other", "s2", &["LIMIT", "2"]);
    take(&mut con, "k", "s2", &["LIMIT", "5"]);
    for token in ["s1", "s2"] {
        assert_eq!(release(&mut con, "k", token), 1);
    }
    take(&mut con, "k", "x2", &[]);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing over every grant: {fences:?}"
    );
}

#[test]
fn lock_fence_answers_each_holder_and_the_highest_without_a_token() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(fence(&mut con, "rw"), None);
    let (_, f1) = hold(&mut con, "rw", 60_000, &["TOKEN", "r1", "SHARED"]);
    let (_, f2) = hold(&mut con, "rw", 60_000, &["TOKEN", "r2", "SHARED"]);
    let (_, f3) = hold(&mut con, "rw", 200, &["TOKEN", "r3", "SHARED"]);
    assert_eq!(fence(&mut con, "rw"), Some(f3));
    for (token, f) in [("r1", f1), ("r2", f2), ("r3", f3)] {
        assert_eq!(fence_of(&mut con, "rw", token), Some(f), "{token}");
    }
    assert_eq!(fence_of(&mut con, "rw", "nobody"), None);
    // The highest *live* fence: r3's lease ends on its own.
    eventually(Duration::from_secs(3), "r3's lease ends", || {
        fence(&mut con, "rw") == Some(f2)
    });
    assert_eq!(fence_of(&mut con, "rw", "r3"), None);
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    assert_eq!(fence(&mut con, "rw"), Some(f1));
    assert_eq!(fence_of(&mut con, "rw", "r2"), None);
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    assert_eq!(fence(&mut con, "rw"), None);

    let (_, s1) = hold(&mut con, "sem", 60_000, &["TOKEN", "s1", "LIMIT", "2"]);
    let (_, s2) = hold(&mut con, "sem", 60_000, &["TOKEN", "s2", "LIMIT", "2"]);
    assert_eq!(fence(&mut con, "sem"), Some(s2));
    assert_eq!(fence_of(&mut con, "sem", "s1"), Some(s1));
    assert_eq!(release(&mut con, "sem", "s2"), 1);
    assert_eq!(fence(&mut con, "sem"), Some(s1));
}

#[test]
fn lock_info_reports_mode_holders_limit_and_waiters_in_order_never_tokens() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    assert!(
        raw.call_str(&["LOCK.INFO", "sem"]).is_nil(),
        "nil when free and nobody waits"
    );
    hold(
        &mut con,
        "sem",
        30_000,
        &["TOKEN", "secret-one", "LIMIT", "3"],
    );
    let (_, f2) = hold(
        &mut con,
        "sem",
        60_000,
        &["TOKEN", "secret-two", "LIMIT", "3"],
    );
    // A permit is free, but an exclusive acquirer waits for every holder, and a
    // shared one behind it waits too.
    let mut writer = Waiter::queue(&server, &mut con, "sem", 60_000, "secret-w", &[]);
    let _reader = Waiter::queue(
        &server,
        &mut con,
        "sem",
        60_000,
        "secret-r",
        &["LIMIT", "3"],
    );
    let reply = assert_info(
        &mut raw,
        "sem",
        &held_info(f2, 60_000, "semaphore", 2, Some(3), (1, 1)),
    );
    let shown = format!("{reply:?}");
    assert!(!shown.contains("secret"), "tokens are never shown: {shown}");

    let (_, r2) = {
        hold(&mut con, "rw", 60_000, &["TOKEN", "secret-a", "SHARED"]);
        hold(&mut con, "rw", 20_000, &["TOKEN", "secret-b", "SHARED"])
    };
    // ttl-ms is the key's PTTL: the latest lease, not the newest holder's.
    let reply = assert_info(
        &mut raw,
        "rw",
        &held_info(r2, 60_000, "shared", 2, None, (0, 0)),
    );
    assert!(!format!("{reply:?}").contains("secret"));

    let (_, x) = hold(&mut con, "ex", 10_000, &["TOKEN", "secret-x"]);
    assert_info(
        &mut raw,
        "ex",
        &held_info(x, 10_000, "exclusive", 1, None, (0, 0)),
    );

    // Both holders leave: the exclusive waiter holds, the reader still waits.
    assert_eq!(release(&mut con, "sem", "secret-one"), 1);
    assert_eq!(release(&mut con, "sem", "secret-two"), 1);
    let (_, w) = writer.granted();
    assert_info(
        &mut raw,
        "sem",
        &held_info(w, 60_000, "exclusive", 1, None, (0, 1)),
    );
}

#[test]
fn keyspace_events_are_emitted_per_holder() {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber =
        keyspace_subscriber(&server, &mut con, &["PSUBSCRIBE", "__keyspace@0__:lock:*"]);
    let event = |e: &str| ("lock:rw".to_string(), e.to_string());

    hold(&mut con, "lock:rw", 60_000, &["TOKEN", "r1", "SHARED"]);
    hold(&mut con, "lock:rw", 60_000, &["TOKEN", "r2", "SHARED"]);
    assert_eq!(refresh(&mut con, "lock:rw", "r1", 60_000), 1);
    let mut writer = Waiter::queue(&server, &mut con, "lock:rw", 60_000, "w", &[]);
    assert_eq!(release(&mut con, "lock:rw", "r1"), 1);
    assert_eq!(release(&mut con, "lock:rw", "r2"), 1);
    writer.granted();
    // Two readers queued behind the writer; the first one's lease is short.
    let mut r3 = Waiter::queue(&server, &mut con, "lock:rw", 100, "r3", &["SHARED"]);
    let mut r4 = Waiter::queue(&server, &mut con, "lock:rw", 60_000, "r4", &["SHARED"]);
    assert_eq!(release(&mut con, "lock:rw", "w"), 1);
    r3.granted();
    r4.granted();

    assert_eq!(
        next_events(&mut subscriber, 8),
        [
            event("lock.acquired"),
            event("lock.acquired"),
            event("lock.refreshed"),
            event("lock.released"),
            // The last reader leaves and the writer is handed the lock.
            event("lock.released"),
            event("lock.acquired"),
            event("lock.handoff"),
            event("lock.released"),
        ]
    );
    // Each of the two readers granted together is acquired and handed off.
    let mut together = next_events(&mut subscriber, 4);
    together.sort();
    assert_eq!(
        together,
        [
            event("lock.acquired"),
            event("lock.acquired"),
            event("lock.handoff"),
            event("lock.handoff"),
        ]
    );
    // r3's own lease ends while r4 holds on.
    assert_eq!(next_events(&mut subscriber, 1), [event("lock.expired")]);
    assert_eq!(refresh(&mut con, "lock:rw", "r3", 60_000), 0);
    assert_eq!(refresh(&mut con, "lock:rw", "r4", 60_000), 1);
    assert_eq!(
        next_events(&mut subscriber, 1),
        [event("lock.refreshed")],
        "the ended holder's refresh announces nothing"
    );
}

#[test]
fn a_guard_runs_for_any_live_shared_holders_token() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    for (token, ttl) in [("r1", "60000"), ("r2", "60000"), ("r3", "200")] {
        assert!(
            acquire_raw(&mut raw, "lock:{d}", ttl, &["TOKEN", token, "SHARED"])
                .grant()
                .is_some()
        );
    }
    let guard = |raw: &mut RawClient, token: &str, argv: &[&str]| {
        let mut full = vec!["LOCK.GUARD", "lock:{d}", token];
        full.extend_from_slice(argv);
        raw.call_str(&full)
    };
    assert!(guard(&mut raw, "r1", &["SET", "{d}:data", "1"]).is_ok());
    assert_eq!(
        guard(&mut raw, "r2", &["INCR", "{d}:data"]),
        Reply::Integer(2)
    );
    assert_eq!(
        guard(&mut raw, "r3", &["INCR", "{d}:data"]),
        Reply::Integer(3)
    );
    assert_eq!(
        guard(&mut raw, "nobody", &["SET", "{d}:data", "0"]),
        err(NOT_HELD)
    );
    assert_eq!(release(&mut con, "lock:{d}", "r1"), 1);
    assert_eq!(
        guard(&mut raw, "r1", &["SET", "{d}:data", "0"]),
        err(NOT_HELD),
        "released"
    );
    eventually(Duration::from_secs(3), "r3's own lease ends", || {
        guard(&mut raw, "r3", &["GET", "{d}:data"]) == err(NOT_HELD)
    });
    assert_eq!(
        guard(&mut raw, "r2", &["GET", "{d}:data"]),
        Reply::Bulk(Some(b"3".to_vec())),
        "the others still write"
    );

    assert!(acquire_raw(
        &mut raw,
        "lock:{d}s",
        "60000",
        &["TOKEN", "s", "LIMIT", "2"]
    )
    .grant()
    .is_some());
    assert!(raw
        .call_str(&["LOCK.GUARD", "lock:{d}s", "s", "SET", "{d}:other", "x"])
        .is_ok());
}

#[test]
fn holders_ending_with_the_key_each_get_their_lock_expired() {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber =
        keyspace_subscriber(&server, &mut con, &["PSUBSCRIBE", "__keyspace@0__:lock:*"]);
    let expired_before = info_field(&mut con, "fencelock", "fencelock_expired")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap();
    // One transaction: the three leases end in the same millisecond as the key.
    let mut pipe = redis::pipe();
    pipe.atomic();
    for token in ["a", "b", "c"] {
        pipe.cmd("LOCK.ACQUIRE")
            .arg("lock:same")
            .arg(200)
            .arg("TOKEN")
            .arg(token)
            .arg("SHARED")
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let events = next_events(&mut subscriber, 6);
    let expired = events.iter().filter(|(_, e)| e == "lock.expired").count();
    assert_eq!(expired, 3, "{events:?}");
    let expired_after = info_field(&mut con, "fencelock", "fencelock_expired")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap();
    assert_eq!(expired_after - expired_before, 3);
}
