//! Modes and their errors: a mode mismatch is `WRONGMODE`, byte for byte, at once, and
//! changes nothing; invalid `LIMIT`s and `SHARED` spellings are refused byte for byte and
//! create nothing; a same-token retry is idempotent in each shared mode.

use std::time::{Duration, Instant};

use testkit::resp::{err, RawClient, Reply};
use testkit::*;

use super::{
    acquire_raw, assert_info, granted, held_info, hold, holders, refresh, Waiter, BAD_LIMIT,
};

const NOT_INT: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";

#[test]
fn mode_mismatches_are_wrongmode_byte_for_byte_and_change_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    hold(&mut con, "lock:sem", 60_000, &["TOKEN", "s", "LIMIT", "3"]);
    hold(&mut con, "lock:rw", 60_000, &["TOKEN", "r", "SHARED"]);
    hold(&mut con, "lock:ex", 60_000, &["TOKEN", "x"]);
    let keys = ["lock:sem", "lock:rw", "lock:ex"];
    let before: Vec<_> = keys
        .iter()
        .map(|key| {
            (
                lock_info(&mut con, key).unwrap(),
                expire_time(&mut con, key),
            )
        })
        .collect();

    let sem = "WRONGMODE lock:sem is a semaphore with limit 3";
    let shared = "WRONGMODE lock:rw is held shared";
    let exclusive = "WRONGMODE lock:ex is held exclusively";
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        // Another token, another shape of shared holding.
        ("lock:sem", vec!["SHARED"], sem),
        ("lock:sem", vec!["TOKEN", "o", "SHARED"], sem),
        ("lock:sem", vec!["TOKEN", "o", "LIMIT", "4"], sem),
        (
            "lock:sem",
            vec!["TOKEN", "o", "LIMIT", "2", "BLOCK", "100"],
            sem,
        ),
        ("lock:sem", vec!["TOKEN", "o", "SHARED", "BLOCK", "0"], sem),
        ("lock:rw", vec!["TOKEN", "o", "LIMIT", "2"], shared),
        (
            "lock:rw",
            vec!["TOKEN", "o", "LIMIT", "2", "BLOCK", "0"],
            shared,
        ),
        // The holder's own token in another mode: no upgrade, no downgrade.
        ("lock:sem", vec!["TOKEN", "s"], sem),
        ("lock:sem", vec!["TOKEN", "s", "SHARED"], sem),
        ("lock:sem", vec!["TOKEN", "s", "LIMIT", "5"], sem),
        ("lock:sem", vec!["TOKEN", "s", "BLOCK", "0"], sem),
        ("lock:rw", vec!["TOKEN", "r"], shared),
        ("lock:rw", vec!["TOKEN", "r", "LIMIT", "2"], shared),
        ("lock:rw", vec!["TOKEN", "r", "BLOCK", "0"], shared),
        ("lock:ex", vec!["TOKEN", "x", "SHARED"], exclusive),
        ("lock:ex", vec!["TOKEN", "x", "LIMIT", "2"], exclusive),
        (
            "lock:ex",
            vec!["TOKEN", "x", "SHARED", "BLOCK", "0"],
            exclusive,
        ),
    ];
    let started = Instant::now();
    for (key, extra, expected) in &cases {
        assert_eq!(
            acquire_raw(&mut raw, key, "1000", extra),
            err(expected),
            "{key} {extra:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "an error never waits"
    );
    // Another token asking the other side of a read-write split is merely busy.
    for (key, extra) in [
        ("lock:rw", vec!["TOKEN", "o"]),
        ("lock:ex", vec!["TOKEN", "o", "SHARED"]),
        ("lock:ex", vec!["TOKEN", "o", "LIMIT", "2"]),
        ("lock:sem", vec!["TOKEN", "o"]),
    ] {
        assert_eq!(
            acquire_raw(&mut raw, key, "1000", &extra),
            Reply::Bulk(None),
            "{key} {extra:?}"
        );
    }
    for (key, (info, deadline)) in keys.iter().zip(before) {
        let mut now = lock_info(&mut con, key).unwrap();
        let mut then = info;
        now.remove("ttl-ms");
        then.remove("ttl-ms");
        assert_eq!(now, then, "{key}");
        assert_eq!(expire_time(&mut con, key), deadline, "{key}");
    }
    assert_eq!(fence_of(&mut con, "lock:sem", "o"), None);
    assert_eq!(waiters(&mut con, "lock:sem"), 0);
}

#[test]
fn invalid_limits_are_refused_byte_for_byte_and_create_nothing() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["LIMIT", "0"], BAD_LIMIT),
        (vec!["LIMIT", "-1"], BAD_LIMIT),
        (vec!["LIMIT", "10001"], BAD_LIMIT),
        (vec!["LIMIT", "9223372036854775807"], BAD_LIMIT),
        (vec!["SHARED", "LIMIT", "0"], BAD_LIMIT),
        (vec!["LIMIT", "0", "BLOCK", "0"], BAD_LIMIT),
        (vec!["LIMIT", "abc"], NOT_INT),
        (vec!["LIMIT", "1.5"], NOT_INT),
        (vec!["LIMIT", ""], NOT_INT),
        (vec!["LIMIT", "99999999999999999999"], NOT_INT),
        (vec!["LIMIT"], SYNTAX),
        (vec!["BLOCK", "0", "LIMIT"], SYNTAX),
        (vec!["SHARED", "SHARED"], SYNTAX),
        (vec!["shared", "SHARED"], SYNTAX),
        (vec!["LIMIT", "2", "limit", "2"], SYNTAX),
        (vec!["SHARED", "1"], SYNTAX),
    ];
    for (extra, expected) in &cases {
        assert_eq!(
            acquire_raw(&mut raw, "k", "1000", extra),
            err(expected),
            "{extra:?}"
        );
    }
    assert_eq!(raw.call_str(&["EXISTS", "k"]), Reply::Integer(0));
    // The bounds and the spellings that are accepted.
    assert!(acquire_raw(&mut raw, "max", "1000", &["LIMIT", "10000"])
        .grant()
        .is_some());
    assert!(acquire_raw(&mut raw, "one", "1000", &["limit", "1"])
        .grant()
        .is_some());
    assert!(acquire_raw(&mut raw, "lower", "1000", &["shared"])
        .grant()
        .is_some());
    let both = acquire_raw(&mut raw, "both", "1000", &["SHARED", "LIMIT", "2"]);
    let (_, fence) = granted(&both);
    assert_info(
        &mut raw,
        "both",
        &held_info(fence, 1_000, "semaphore", 1, Some(2), (0, 0)),
    );
}

#[test]
fn same_token_retries_are_idempotent_in_each_shared_mode() {
    let server = Server::start();
    let mut con = server.connect();
    // A reader: same fence, the lease restarts, still one holder.
    let first = hold(&mut con, "rw", 1_000, &["TOKEN", "r", "SHARED"]);
    let again = hold(&mut con, "rw", 60_000, &["token", "r", "shared"]);
    assert_eq!(again, first);
    assert!(int(&mut con, &["PTTL", "rw"]) > 50_000);
    assert_eq!(holders(&mut con, "rw"), 1);

    // A full semaphore with a queued waiter: its holders still renew, at once, with or
    // without BLOCK, and the retry adds no holder.
    let s1 = hold(&mut con, "sem", 60_000, &["TOKEN", "s1", "LIMIT", "2"]);
    let s2 = hold(&mut con, "sem", 60_000, &["TOKEN", "s2", "LIMIT", "2"]);
    let mut waiter = Waiter::queue(&server, &mut con, "sem", 60_000, "w", &["LIMIT", "2"]);
    assert_eq!(
        hold(&mut con, "sem", 60_000, &["TOKEN", "s1", "LIMIT", "2"]),
        s1
    );
    assert_eq!(
        hold(
            &mut con,
            "sem",
            60_000,
            &["LIMIT", "2", "BLOCK", "0", "TOKEN", "s2"]
        ),
        s2
    );
    assert_eq!(holders(&mut con, "sem"), 2);
    assert_eq!(waiters(&mut con, "sem"), 1);
    waiter.assert_waiting("the retries took no permit");

    // The lease restarts even when shorter: s1's own lease now ends soon, and its
    // permit goes to the waiter while s2 keeps its own.
    assert_eq!(
        hold(&mut con, "sem", 200, &["TOKEN", "s1", "LIMIT", "2"]),
        s1
    );
    let (token, fence) = waiter.granted();
    assert_eq!(token, "w");
    assert!(fence > s2.1);
    assert_eq!(refresh(&mut con, "sem", "s1", 60_000), 0);
    assert_eq!(refresh(&mut con, "sem", "s2", 60_000), 1);
}
