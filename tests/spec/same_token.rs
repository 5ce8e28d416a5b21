//! Same-token retries and waits: a token whose shared holding ran out into its
//! lock-delay holds nothing and is not let back in before its room's quarantine ends
//! (by `LOCK.ACQUIRE`, `LIMIT`, another session, `LOCK.ACQUIREALL` or a `BLOCK` wait):
//! its expired fence never holds again, and the quarantine keeps excluding writers to
//! its end. A retry or a second wait that names a `VALUE` sets it on every key it holds.

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

/// How long the rooms of these tests stay quarantined once their 100 ms lease ends.
const DELAY_MS: i64 = 3_000;

/// `token` holds `key` shared for 100 ms with a lock-delay; returns the fence once the
/// lease has run out (the room quarantined).
fn expired_reader(con: &mut Connection, key: &str, token: &str, extra: &[&str]) -> i64 {
    let delay = DELAY_MS.to_string();
    let mut argv = vec!["TOKEN", token, "LOCKDELAY", &delay];
    argv.extend_from_slice(extra);
    let (_, fence) = acquire(con, key, 100, &argv).expect("granted");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(fence_of(con, key, token), None, "the lease ran out");
    fence
}

fn observed_value(con: &mut Connection, key: &str) -> Option<String> {
    let state: (i64, Option<String>) = cmd("LOCK.OBSERVE").arg(key).query(con).unwrap();
    state.1
}

#[test]
fn a_shared_retry_of_an_expired_token_keeps_the_quarantine_and_revives_no_fence() {
    let server = Server::start();
    let mut con = server.connect();
    let expired = expired_reader(&mut con, "rw", "r", &["SHARED"]);
    assert_eq!(
        acquire(&mut con, "rw", 10_000, &["SHARED", "TOKEN", "r"]),
        None,
        "the token's own room is quarantined"
    );
    assert_eq!(
        fence_of(&mut con, "rw", "r"),
        None,
        "{expired} never holds again"
    );
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "rw", "r"]), 0);
    assert_eq!(
        acquire(&mut con, "rw", 10_000, &["TOKEN", "w"]),
        None,
        "a writer waits for the quarantine's end"
    );
    assert!(
        int(&mut con, &["PTTL", "rw"]) > 1_000,
        "the key lasts the delay"
    );
    // Other readers still fit beside a quarantined reader.
    let (_, other) = acquire(&mut con, "rw", 10_000, &["SHARED", "TOKEN", "r2"]).unwrap();
    assert!(other > expired);
}

#[test]
fn a_semaphore_retry_of_an_expired_token_does_not_free_its_quarantined_permit() {
    let server = Server::start();
    let mut con = server.connect();
    expired_reader(&mut con, "sem", "a", &["LIMIT", "2"]);
    if acquire(&mut con, "sem", 10_000, &["LIMIT", "2", "TOKEN", "a"]).is_some() {
        assert_eq!(int(&mut con, &["LOCK.RELEASE", "sem", "a"]), 1);
    }
    assert!(acquire(&mut con, "sem", 10_000, &["LIMIT", "2", "TOKEN", "b"]).is_some());
    assert_eq!(
        acquire(&mut con, "sem", 10_000, &["LIMIT", "2", "TOKEN", "c"]),
        None,
        "a's permit stays taken by its quarantine"
    );
}

#[test]
fn a_retry_of_an_expired_token_in_another_session_is_not_listed_anywhere() {
    let server = Server::start();
    let mut con = server.connect();
    expired_reader(&mut con, "rw", "r", &["SHARED", "SESSION", "s1"]);
    let retry = ["SHARED", "TOKEN", "r", "SESSION", "s2"];
    assert_eq!(acquire(&mut con, "rw", 10_000, &retry), None);
    assert!(
        held(&mut con, "s1").is_empty(),
        "an expired holding is not held"
    );
    assert!(held(&mut con, "s2").is_empty());
    assert_eq!(acquire(&mut con, "rw", 10_000, &["TOKEN", "w"]), None);
}

#[test]
fn an_acquireall_retry_of_an_expired_token_keeps_the_quarantine() {
    let server = Server::start();
    let mut con = server.connect();
    let expired = expired_reader(&mut con, "a", "r", &["SHARED"]);
    let mut client = RawClient::connect(server.port);
    let retry = [
        "LOCK.ACQUIREALL",
        "2",
        "a",
        "b",
        "10000",
        "SHARED",
        "TOKEN",
        "r",
    ];
    assert!(client.call_str(&retry).is_nil(), "a's room is quarantined");
    assert_eq!(
        fence_of(&mut con, "a", "r"),
        None,
        "{expired} never holds again"
    );
    assert_eq!(int(&mut con, &["EXISTS", "b"]), 0, "nothing granted");
    assert_eq!(acquire(&mut con, "a", 10_000, &["TOKEN", "w"]), None);
}

#[test]
fn a_same_token_shared_wait_is_granted_a_new_fence_when_the_quarantine_ends() {
    let server = Server::start();
    let mut con = server.connect();
    let started = now_ms();
    let expired = expired_reader(&mut con, "rw", "r", &["SHARED"]);
    let mut client = RawClient::connect(server.port);
    let wait = [
        "LOCK.ACQUIRE",
        "rw",
        "10000",
        "SHARED",
        "TOKEN",
        "r",
        "BLOCK",
        "0",
    ];
    client.send_pipeline(&[&wait]);
    wait_for_waiters(&mut con, "rw", 1);
    assert_eq!(
        fence_of(&mut con, "rw", "r"),
        None,
        "{expired} never holds again"
    );
    assert_eq!(acquire(&mut con, "rw", 10_000, &["TOKEN", "w"]), None);
    let reply = client.read_reply();
    let (_, fence) = reply.grant().expect("granted once the quarantine is over");
    assert!(
        now_ms() >= started + 100 + DELAY_MS,
        "not before the delay ends"
    );
    assert!(fence > expired);
    assert_eq!(fence_of(&mut con, "rw", "r"), Some(fence));
}

#[test]
fn the_later_of_two_same_token_waits_sets_the_value() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "leader", 60_000, &["TOKEN", "h"]).unwrap();
    let mut first = RawClient::connect(server.port);
    let mut second = RawClient::connect(server.port);
    let wait = |value| {
        [
            "LOCK.ACQUIRE",
            "leader",
            "10000",
            "TOKEN",
            "c",
            "VALUE",
            value,
            "BLOCK",
            "0",
        ]
    };
    first.send_pipeline(&[&wait("10.0.0.1:80")]);
    wait_for_waiters(&mut con, "leader", 1);
    second.send_pipeline(&[&wait("10.0.0.2:80")]);
    wait_for_waiters(&mut con, "leader", 2);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "leader", "h"]), 1);
    let (_, fence) = first
        .read_reply()
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .unwrap();
    assert_eq!(second.read_reply().grant().map(|(_, f)| f), Some(fence));
    assert_eq!(
        observed_value(&mut con, "leader").as_deref(),
        Some("10.0.0.2:80")
    );
}

#[test]
fn an_acquireall_retry_sets_its_value_on_keys_it_already_held() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "a", 60_000, &["TOKEN", "t", "VALUE", "old"]).unwrap();
    let mut client = RawClient::connect(server.port);
    let retry = [
        "LOCK.ACQUIREALL",
        "2",
        "a",
        "b",
        "10000",
        "TOKEN",
        "t",
        "VALUE",
        "new",
    ];
    assert!(matches!(client.call_str(&retry), Reply::Array(Some(_))));
    assert_eq!(observed_value(&mut con, "a").as_deref(), Some("new"));
    assert_eq!(observed_value(&mut con, "b").as_deref(), Some("new"));
}
