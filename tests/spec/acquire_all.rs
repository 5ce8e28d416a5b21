//! `LOCK.ACQUIREALL`: every key or none, one token, a fresh fence per key in the order
//! given, each holding released or refreshed on its own; every error byte for byte and
//! changing nothing; a retry with the same token renews; with `BLOCK` it waits in every
//! queue at once, never holds part of its keys (not even for `LOCK.INFO`), keeps its
//! place at the head of a queue (a key it was first for stays free), and is answered
//! once whichever way its wait ends.

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

/// `[token, [fences]]`, or `None` for nil; panics on anything else.
fn grant_all(reply: &Reply) -> Option<(String, Vec<i64>)> {
    match reply {
        Reply::Array(Some(items)) => match items.as_slice() {
            [Reply::Bulk(Some(token)), Reply::Array(Some(fences))] => {
                let fences = fences
                    .iter()
                    .map(|f| f.integer().unwrap_or_else(|| panic!("fence {f:?}")))
                    .collect();
                Some((String::from_utf8_lossy(token).into_owned(), fences))
            }
            _ => panic!("not a grant of several keys: {reply:?}"),
        },
        reply if reply.is_nil() => None,
        other => panic!("not a grant of several keys: {other:?}"),
    }
}

fn acquire_all(client: &mut RawClient, argv: &[&str]) -> Option<(String, Vec<i64>)> {
    let mut full = vec!["LOCK.ACQUIREALL"];
    full.extend_from_slice(argv);
    grant_all(&client.call_str(&full))
}

fn error_of(client: &mut RawClient, argv: &[&str]) -> String {
    let mut full = vec!["LOCK.ACQUIREALL"];
    full.extend_from_slice(argv);
    match client.call_str(&full) {
        Reply::Error(text) => text,
        other => panic!("{argv:?}: expected an error, got {other:?}"),
    }
}

#[test]
fn every_key_is_granted_with_one_token_and_a_fresh_fence_each_in_key_order() {
    let server = Server::start();
    let mut client = RawClient::connect(server.port);
    let mut con = server.connect();
    let (token, fences) = acquire_all(&mut client, &["3", "c", "a", "b", "10000"]).unwrap();
    assert_eq!(fences.len(), 3);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    for (key, fence) in ["c", "a", "b"].iter().zip(&fences) {
        assert_eq!(fence_of(&mut con, key, &token), Some(*fence), "{key}");
    }
    // Each holding is an ordinary one: refreshed and released on its own.
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "a", &token, "50000"]), 1);
    assert!(int(&mut con, &["PTTL", "a"]) > 40_000);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "c", &token]), 1);
    assert_eq!(fence_of(&mut con, "c", &token), None);
    assert_eq!(fence_of(&mut con, "b", &token), Some(fences[2]));
}

#[test]
fn one_key_taken_means_none_is_granted_and_nothing_changes() {
    let server = Server::start();
    let mut client = RawClient::connect(server.port);
    let mut con = server.connect();
    let (holder, _) = acquire(&mut con, "b", 60_000, &[]).unwrap();
    assert_eq!(
        acquire_all(&mut client, &["3", "a", "b", "c", "10000"]),
        None
    );
    assert_eq!(int(&mut con, &["EXISTS", "a", "c"]), 0);
    assert!(fence_of(&mut con, "b", &holder).is_some());
    // Shared holders admit a shared request for several keys, not an exclusive one.
    acquire(&mut con, "r", 60_000, &["SHARED"]).unwrap();
    assert_eq!(acquire_all(&mut client, &["2", "r", "x", "10000"]), None);
    let shared = acquire_all(&mut client, &["2", "r", "x", "10000", "SHARED"]);
    assert_eq!(shared.map(|(_, fences)| fences.len()), Some(2));
}

#[test]
fn errors_are_exact_and_change_nothing() {
    let server = Server::start();
    let mut client = RawClient::connect(server.port);
    let mut con = server.connect();
    let arity = "ERR wrong number of arguments for 'lock.acquireall' command";
    let not_int = "ERR value is not an integer or out of range";
    let cases: &[(&[&str], &str)] = &[
        (&["1"], arity),
        (&["1", "a"], arity),
        (&["3", "a", "b", "1000"], arity),
        (&["x", "a", "1000"], not_int),
        (&["0", "a", "1000"], "ERR numkeys should be greater than 0"),
        (&["-1", "a", "1000"], "ERR numkeys should be greater than 0"),
        (&["65", "a", "1000"], "ERR numkeys should be at most 64"),
        (&["2", "a", "a", "1000"], "ERR duplicate key 'a'"),
        (&["2", "a", "b", "x"], not_int),
        (
            &["2", "a", "b", "0"],
            "ERR invalid expire time in 'lock.acquireall' command",
        ),
        (&["2", "a", "b", "1000", "NOPE"], "ERR syntax error"),
        (
            &["2", "a", "b", "1000", "BLOCK", "-1"],
            "ERR timeout is negative",
        ),
        (&["2", "a", "b", "1000", "TOKEN", ""], "ERR invalid token"),
        (
            &["2", "a", "b", "1000", "SESSION", ""],
            "ERR invalid session",
        ),
        (
            &["2", "a", "b", "1000", "SHARED", "SHARED"],
            "ERR syntax error",
        ),
    ];
    for (argv, want) in cases {
        assert_eq!(&error_of(&mut client, argv), want, "{argv:?}");
    }
    assert_eq!(arity, error_of(&mut client, &[]));
    cmd("SET").arg("s").arg("x").exec(&mut con).unwrap();
    assert_eq!(
        error_of(&mut client, &["2", "a", "s", "1000"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    acquire(&mut con, "sem", 60_000, &["LIMIT", "3"]).unwrap();
    assert_eq!(
        error_of(&mut client, &["2", "a", "sem", "1000", "SHARED"]),
        "WRONGMODE sem is a semaphore with limit 3"
    );
    acquire(&mut con, "mine", 60_000, &["TOKEN", "t", "SESSION", "s1"]).unwrap();
    assert_eq!(
        error_of(
            &mut client,
            &["2", "a", "mine", "1000", "TOKEN", "t", "SESSION", "s2"]
        ),
        "WRONGSESSION this token holds mine in another session"
    );
    assert_eq!(
        int(&mut con, &["EXISTS", "a", "b"]),
        0,
        "nothing was granted"
    );
    cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-keys")
        .arg("2")
        .exec(&mut con)
        .unwrap();
    assert_eq!(
        error_of(&mut client, &["3", "a", "b", "c", "1000"]),
        "ERR numkeys should be at most 2"
    );
}

#[test]
fn a_retry_with_the_same_token_renews_what_it_holds_and_takes_the_rest() {
    let server = Server::start();
    let mut client = RawClient::connect(server.port);
    let mut con = server.connect();
    let (_, first) = acquire_all(&mut client, &["2", "a", "b", "5000", "TOKEN", "t"]).unwrap();
    let (token, again) = acquire_all(&mut client, &["2", "a", "b", "50000", "TOKEN", "t"]).unwrap();
    assert_eq!((token.as_str(), &again), ("t", &first), "same fences");
    assert!(int(&mut con, &["PTTL", "b"]) > 40_000, "lease restarted");
    let (_, wider) =
        acquire_all(&mut client, &["3", "a", "b", "c", "50000", "TOKEN", "t"]).unwrap();
    assert_eq!(&wider[..2], &first[..]);
    assert!(wider[2] > first[1]);
}

#[test]
fn a_blocked_request_waits_for_every_key_and_never_holds_part_of_them() {
    let server = Server::start();
    let mut con = server.connect();
    let (a, _) = acquire(&mut con, "a", 60_000, &[]).unwrap();
    let (b, _) = acquire(&mut con, "b", 60_000, &[]).unwrap();
    let mut waiter = RawClient::connect(server.port);
    waiter.send(&["LOCK.ACQUIREALL", "3", "a", "b", "c", "10000", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "c", 1);
    assert_eq!(waiters(&mut con, "a"), 1);
    // c is free, and stays free while its first waiter waits for a and b: nobody
    // behind it (nor a newcomer) may take it.
    assert_eq!(acquire(&mut con, "c", 1_000, &[]), None);
    int(&mut con, &["LOCK.RELEASE", "a", &a]);
    assert_eq!(waiter.try_read_reply(Duration::from_millis(200)), None);
    assert_eq!(
        int(&mut con, &["EXISTS", "a", "c"]),
        0,
        "no partial holding"
    );
    int(&mut con, &["LOCK.RELEASE", "b", &b]);
    let (token, fences) = grant_all(&waiter.read_reply()).unwrap();
    for (key, fence) in ["a", "b", "c"].iter().zip(&fences) {
        assert_eq!(fence_of(&mut con, key, &token), Some(*fence), "{key}");
    }
    assert_eq!(waiters(&mut con, "a") + waiters(&mut con, "c"), 0);
}

#[test]
fn two_requests_for_overlapping_keys_are_served_in_arrival_order() {
    let server = Server::start();
    let mut con = server.connect();
    let (b, _) = acquire(&mut con, "b", 60_000, &[]).unwrap();
    let mut first = RawClient::connect(server.port);
    first.send(&["LOCK.ACQUIREALL", "2", "a", "b", "60000", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "a", 1);
    let mut second = RawClient::connect(server.port);
    second.send(&["LOCK.ACQUIREALL", "2", "b", "a", "60000", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "a", 2);
    let mut single = RawClient::connect(server.port);
    single.send(&["LOCK.ACQUIRE", "a", "60000", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "a", 3);
    int(&mut con, &["LOCK.RELEASE", "b", &b]);
    let (token, _) = grant_all(&first.read_reply()).unwrap();
    assert_eq!(second.try_read_reply(Duration::from_millis(100)), None);
    int(&mut con, &["LOCK.RELEASE", "a", &token]);
    assert_eq!(
        second.try_read_reply(Duration::from_millis(100)),
        None,
        "b still held"
    );
    int(&mut con, &["LOCK.RELEASE", "b", &token]);
    let (second_token, _) = grant_all(&second.read_reply()).unwrap();
    int(&mut con, &["LOCK.RELEASE", "a", &second_token]);
    assert!(single.read_reply().grant().is_some());
}

#[test]
fn a_wait_ends_once_by_timeout_unblock_or_disconnect_and_its_queues_move_on() {
    let server = Server::start();
    let mut con = server.connect();
    let (a, _) = acquire(&mut con, "a", 60_000, &[]).unwrap();
    let mut timed = RawClient::connect(server.port);
    timed.send(&["LOCK.ACQUIREALL", "2", "a", "b", "1000", "BLOCK", "150"].map(str::as_bytes));
    assert!(timed.read_reply().is_nil());
    assert_eq!(waiters(&mut con, "b"), 0);
    let mut unblocked = RawClient::connect(server.port);
    let id = unblocked.call_str(&["CLIENT", "ID"]).integer().unwrap();
    unblocked.send(&["LOCK.ACQUIREALL", "2", "a", "b", "1000", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "b", 1);
    // Behind it in b's queue: served once it is gone, though b was free all along.
    let mut behind = RawClient::connect(server.port);
    behind.send(&["LOCK.ACQUIRE", "b", "1000", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "b", 2);
    assert_eq!(int(&mut con, &["CLIENT", "UNBLOCK", &id.to_string()]), 1);
    assert!(unblocked.read_reply().is_nil());
    assert!(behind.read_reply().grant().is_some());
    assert_eq!(
        unblocked.try_read_reply(Duration::from_millis(100)),
        None,
        "once"
    );
    let mut gone = RawClient::connect(server.port);
    gone.send(&["LOCK.ACQUIREALL", "2", "a", "c", "1000", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "c", 1);
    drop(gone);
    eventually(
        Duration::from_secs(5),
        "the disconnected wait leaves",
        || waiters(&mut con, "c") == 0 && waiters(&mut con, "a") == 0,
    );
    int(&mut con, &["LOCK.RELEASE", "a", &a]);
    assert_eq!(int(&mut con, &["EXISTS", "a", "c"]), 0);
}

#[test]
fn a_session_closed_while_waiting_is_answered_nil_and_its_grants_are_the_sessions() {
    let server = Server::start();
    let mut con = server.connect();
    let (a, _) = acquire(&mut con, "a", 60_000, &[]).unwrap();
    let mut waiter = RawClient::connect(server.port);
    waiter.send(
        &[
            "LOCK.ACQUIREALL",
            "2",
            "a",
            "b",
            "1000",
            "SESSION",
            "s",
            "BLOCK",
            "0",
        ]
        .map(str::as_bytes),
    );
    wait_for_waiters(&mut con, "b", 1);
    assert_eq!(int(&mut con, &["LOCK.CLOSE", "s"]), 0);
    assert!(waiter.read_reply().is_nil());
    int(&mut con, &["LOCK.RELEASE", "a", &a]);
    let mut client = RawClient::connect(server.port);
    acquire_all(&mut client, &["2", "a", "b", "1000", "SESSION", "s"]).unwrap();
    let keys: Vec<String> = held(&mut con, "s").into_iter().map(|h| h.key).collect();
    assert_eq!(keys, vec!["a", "b"]);
    assert_eq!(keepalive(&mut con, "s", 60_000), 2);
    assert_eq!(int(&mut con, &["LOCK.CLOSE", "s"]), 2);
    assert_eq!(int(&mut con, &["EXISTS", "a", "b"]), 0);
}

fn handoff_looks(con: &mut Connection) -> i64 {
    info_field(con, "fencelock", "fencelock_handoff_looks")
        .and_then(|value| value.parse().ok())
        .expect("fencelock_handoff_looks")
}

/// A session holds 1,024 keys and one client waits for all of them (in `order`): the
/// `LOCK.CLOSE` that hands them over looks at each key a few times, not once per key
/// released.
fn close_hands_many_keys_to_one_wait(reversed: bool) {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-keys")
        .arg("1024")
        .query(&mut con)
        .unwrap();
    let keys: Vec<String> = (0..1024).map(|i| format!("k{i:04}")).collect();
    let request = |keys: &[String], tail: &[&str]| {
        let mut argv: Vec<String> = vec!["LOCK.ACQUIREALL".into(), "1024".into()];
        argv.extend(keys.iter().cloned());
        argv.extend(tail.iter().map(|s| s.to_string()));
        argv
    };
    let mut holder = RawClient::connect(server.port);
    let held = request(&keys, &["600000", "SESSION", "s"]);
    let held: Vec<&str> = held.iter().map(String::as_str).collect();
    assert!(matches!(holder.call_str(&held), Reply::Array(Some(_))));
    let mut wanted = keys.clone();
    if reversed {
        wanted.reverse();
    }
    let wait = request(&wanted, &["60000", "TOKEN", "w", "BLOCK", "0"]);
    let wait: Vec<&str> = wait.iter().map(String::as_str).collect();
    let mut waiter = RawClient::connect(server.port);
    waiter.send_pipeline(&[&wait]);
    wait_for_waiters(&mut con, "k0000", 1);
    let before = handoff_looks(&mut con);
    assert_eq!(int(&mut con, &["LOCK.CLOSE", "s"]), 1024);
    assert!(
        matches!(waiter.read_reply(), Reply::Array(Some(_))),
        "granted"
    );
    let looks = handoff_looks(&mut con) - before;
    // About four a key (each key found takeable once, each busy one once a release,
    // and the look at all of them before the grant); a turn that looked at every key
    // each time a key was freed made it half a million.
    assert!(
        looks <= 8 * 1024,
        "{looks} keys looked at to hand 1,024 keys to one wait (reversed: {reversed})"
    );
}

#[test]
fn closing_a_session_hands_its_keys_to_a_wait_for_all_of_them_in_linear_work() {
    close_hands_many_keys_to_one_wait(false);
    close_hands_many_keys_to_one_wait(true);
}
