//! `WATCH` on a lock key, and client-side caching: a command aborts a transaction
//! watching the lock, or invalidates a cached read of it, exactly when it changed the
//! lock — as `SET … NX` that finds the key taken changes nothing and disturbs nobody.

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

/// A watcher of `lock` runs `command` on its own connection between `WATCH` and `EXEC`
/// (as a client checking its lock inside an optimistic transaction would); whether its
/// transaction still ran.
fn transaction_survives(watcher: &mut RawClient, lock: &str, command: &[&str]) -> bool {
    assert!(watcher.call_str(&["WATCH", lock]).is_ok());
    watcher.call_str(command);
    transaction_runs(watcher)
}

/// Runs a transaction on a connection that watches a key: whether it ran (the key did
/// not change since `WATCH`).
fn transaction_runs(watcher: &mut RawClient) -> bool {
    watcher.send_pipeline(&[&["MULTI"], &["PING"], &["EXEC"]]);
    watcher.read_reply();
    watcher.read_reply();
    match watcher.read_reply() {
        Reply::Array(Some(_)) => true,
        Reply::Array(None) | Reply::Bulk(None) => false,
        other => panic!("EXEC answered {other:?}"),
    }
}

/// Held exclusively by token `a`, and a semaphore of 1 held by token `s`.
fn held_locks() -> (Server, RawClient) {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "lock", "60000", "TOKEN", "a"])
        .grant()
        .is_some());
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "sem", "60000", "TOKEN", "s", "LIMIT", "1"])
        .grant()
        .is_some());
    (server, raw)
}

#[test]
fn commands_that_change_no_lock_leave_a_watch_alone() {
    let (_server, mut watcher) = held_locks();
    let unchanged: &[&[&str]] = &[
        &["LOCK.ACQUIRE", "lock", "1000"],
        &["LOCK.ACQUIRE", "lock", "1000", "TOKEN", "b"],
        &["LOCK.ACQUIRE", "lock", "1000", "SHARED"],
        &["LOCK.ACQUIRE", "lock", "1000", "TOKEN", "a", "SHARED"],
        &["LOCK.RELEASE", "lock", "b"],
        &["LOCK.REFRESH", "lock", "b", "1000"],
        &["LOCK.FENCE", "lock", "a"],
        &["LOCK.INFO", "lock"],
        &["LOCK.GUARD", "lock", "a", "PING"],
        &["LOCK.ACQUIRE", "sem", "1000", "LIMIT", "1"],
        &["LOCK.ACQUIRE", "sem", "1000", "LIMIT", "2"],
        &["LOCK.ACQUIRE", "sem", "1000"],
        &["LOCK.RELEASE", "sem", "b"],
        &["LOCK.REFRESH", "sem", "b", "1000"],
        &["LOCK.RELEASE", "free", "b"],
        &["LOCK.ACQUIRE", "lock", "0"],
    ];
    for command in unchanged {
        let lock = command[1];
        assert!(
            transaction_survives(&mut watcher, lock, command),
            "{command:?} changed nothing, yet aborted a transaction watching {lock}"
        );
    }
}

#[test]
fn a_refused_blocking_acquire_leaves_a_watch_alone_while_it_waits_and_times_out() {
    let (server, mut watcher) = held_locks();
    assert!(watcher.call_str(&["WATCH", "lock"]).is_ok());
    let mut waiter = RawClient::connect(server.port);
    assert!(waiter
        .call_str(&["LOCK.ACQUIRE", "lock", "1000", "BLOCK", "50"])
        .is_nil());
    assert!(
        transaction_runs(&mut watcher),
        "a wait that timed out aborted a transaction watching the lock"
    );
}

#[test]
fn every_change_of_a_lock_aborts_a_transaction_watching_it() {
    let (server, mut watcher) = held_locks();
    let changes: &[&[&str]] = &[
        &["LOCK.REFRESH", "lock", "a", "50000"],
        &["LOCK.REFRESH", "lock", "a", "1000", "ADD"],
        &["LOCK.ACQUIRE", "lock", "60000", "TOKEN", "a"],
        &["LOCK.RELEASE", "lock", "a"],
        &["LOCK.ACQUIRE", "lock", "60000", "TOKEN", "a"],
        &["LOCK.ACQUIRE", "sem", "60000", "TOKEN", "s", "LIMIT", "1"],
        &["LOCK.REFRESH", "sem", "s", "50000"],
        &["LOCK.RELEASE", "sem", "s"],
        &["LOCK.ACQUIRE", "sem", "60000", "SHARED"],
        &["LOCK.ACQUIRE", "sem", "60000", "SHARED"],
        &["LOCK.APPLY", "x", "t", "7"],
    ];
    for command in changes {
        let lock = command[1];
        assert!(
            !transaction_survives(&mut watcher, lock, command),
            "{command:?} changed {lock}, yet a transaction watching it ran"
        );
    }
    // A handoff to a waiter, by release and by the end of a shared holder's lease.
    let mut waiter = RawClient::connect(server.port);
    waiter.send(&[b"LOCK.ACQUIRE", b"lock", b"60000", b"BLOCK", b"5000"]);
    let mut con = server.connect();
    wait_for_waiters(&mut con, "lock", 1);
    assert!(watcher.call_str(&["WATCH", "lock"]).is_ok());
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "lock", "a"]), 1);
    assert!(waiter.read_reply().grant().is_some());
    assert!(
        !transaction_runs(&mut watcher),
        "the handoff changed the lock, yet a transaction watching it ran"
    );
    acquire(&mut con, "readers", 60_000, &["SHARED"]).unwrap();
    acquire(&mut con, "readers", 100, &["SHARED"]).unwrap();
    assert!(watcher.call_str(&["WATCH", "readers"]).is_ok());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        lock_info(&mut con, "readers").and_then(|info| info.get("holders").cloned()),
        Some(redis::Value::Int(1))
    );
    assert!(
        !transaction_runs(&mut watcher),
        "a shared holder's lease ended, yet a transaction watching the lock ran"
    );
}

#[test]
fn client_side_caching_is_invalidated_by_changes_only() {
    let (server, _) = held_locks();
    // RESP2 tracking: invalidations go to a subscriber of `__redis__:invalidate`.
    let mut invalidations = RawClient::connect(server.port);
    let Reply::Integer(id) = invalidations.call_str(&["CLIENT", "ID"]) else {
        panic!("CLIENT ID");
    };
    invalidations.call_str(&["SUBSCRIBE", "__redis__:invalidate"]);
    let mut reader = RawClient::connect(server.port);
    let id = id.to_string();
    assert!(reader
        .call_str(&["CLIENT", "TRACKING", "on", "REDIRECT", &id])
        .is_ok());
    reader.call_str(&["LOCK.INFO", "lock"]);
    let mut other = server.connect();
    assert_eq!(acquire(&mut other, "lock", 1000, &[]), None);
    assert_eq!(int(&mut other, &["LOCK.RELEASE", "lock", "b"]), 0);
    assert_eq!(
        invalidations.try_read_reply(Duration::from_millis(200)),
        None,
        "a refused acquire or a wrong-token release invalidated a cached read"
    );
    assert_eq!(int(&mut other, &["LOCK.RELEASE", "lock", "a"]), 1);
    let invalidation = invalidations.try_read_reply(Duration::from_secs(2));
    let expected = Reply::Array(Some(vec![
        Reply::Bulk(Some(b"message".to_vec())),
        Reply::Bulk(Some(b"__redis__:invalidate".to_vec())),
        Reply::Array(Some(vec![Reply::Bulk(Some(b"lock".to_vec()))])),
    ]));
    assert_eq!(
        invalidation,
        Some(expected),
        "a release did not invalidate a cached read of the lock"
    );
}

/// `LOCK.APPLY` that writes what the key already holds (a replayed effect, an AOF
/// replayed twice, a repair run again) changes nothing, so it leaves a watch alone; one
/// that moves a deadline, or writes another holder, does not.
#[test]
fn a_lock_apply_that_changes_nothing_leaves_a_watch_alone() {
    let (server, mut watcher) = held_locks();
    let mut raw = RawClient::connect(server.port);
    let deadline = (now_ms() + 60_000).to_string();
    let later = (now_ms() + 90_000).to_string();
    let exclusive = ["LOCK.APPLY", "x", "t", "7", "PXAT", &deadline];
    let shared = ["LOCK.APPLY", "rw", "r", "8", "PXAT", &deadline, "SHARED"];
    let semaphore = [
        "LOCK.APPLY",
        "sm",
        "p",
        "9",
        "PXAT",
        &deadline,
        "LIMIT",
        "3",
    ];
    for apply in [&exclusive[..], &shared[..], &semaphore[..]] {
        assert!(raw.call_str(apply).is_ok(), "{apply:?}");
        assert!(
            transaction_survives(&mut watcher, apply[1], apply),
            "{apply:?} again changed nothing, yet a transaction watching it was aborted"
        );
    }
    // Without PXAT (the AOF rewrite form) an exclusive holding that is the same.
    assert!(transaction_survives(
        &mut watcher,
        "x",
        &["LOCK.APPLY", "x", "t", "7"]
    ));
    for change in [
        &["LOCK.APPLY", "x", "t", "7", "PXAT", &later][..],
        &["LOCK.APPLY", "x", "u", "10", "PXAT", &later],
        &["LOCK.APPLY", "rw", "r", "8", "PXAT", &later, "SHARED"],
        &["LOCK.APPLY", "rw", "q", "11", "PXAT", &later, "SHARED"],
        &["LOCK.APPLY", "sm", "p", "9", "PXAT", &deadline, "SHARED"],
    ] {
        assert!(
            !transaction_survives(&mut watcher, change[1], change),
            "{change:?} changed the lock, yet a transaction watching it ran"
        );
    }
}
