//! Waits: a `BLOCK` acquire goes on a connection of its own, with no client timeout
//! shorter than `BLOCK` (or a `BLOCK` shorter than the timeout), so that a wait the
//! client gives up on is gone from the server; and refreshes go on a connection no wait
//! can hold up.

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

use super::{random_token, send};

/// A client's own timeout fires before `BLOCK` ends. Broken: the client gives up and
/// keeps the connection (a multiplexed client: ioredis' `commandTimeout`, the `redis`
/// crate's async response timeout): the wait stays queued, the holder's release grants
/// the lock to it, nobody reads that grant, and the key stays locked for the grant's
/// whole ttl. Kept: a client that closes the connection when it gives up (the `redis`
/// crate's sync connection, dropped after its read timeout) takes the wait with it, and
/// a `BLOCK` shorter than the client's timeout ends on the server first: after the
/// release the key is free.
#[test]
fn a_wait_abandoned_on_an_open_connection_leaves_an_orphaned_grant() {
    let server = Server::start();
    let mut con = server.connect();
    let ttl = 60_000;

    let key = "lock:orphaned";
    let (holder, _) = hold(&mut con, key, 30_000, &[]);
    let mut abandoned = RawClient::connect(server.port);
    send(
        &mut abandoned,
        &["LOCK.ACQUIRE", key, "60000", "BLOCK", "30000"],
    );
    wait_for_waiters(&mut con, key, 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", key, &holder]), 1);
    let orphan = fence(&mut con, key).expect("the abandoned wait was granted");
    // The expiry and the fence are two reads of the server's clock in one step: a few
    // ms apart at most, where a lease that was not the whole ttl would be far shorter.
    let locked_for = expire_time(&mut con, key) - fence_ms(orphan);
    assert!(
        (ttl - 5..=ttl + 5).contains(&locked_for),
        "locked for {locked_for} ms from the grant, not the whole ttl"
    );
    assert_eq!(acquire(&mut con, key, 30_000, &[]), None);
    drop(abandoned);

    let key = "lock:closed";
    let (holder, _) = hold(&mut con, key, 30_000, &[]);
    let mut waiter = server.connect();
    waiter
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let timed_out: redis::RedisResult<Option<(String, i64)>> = cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(ttl)
        .arg("BLOCK")
        .arg(30_000)
        .query(&mut waiter);
    assert!(
        timed_out.as_ref().is_err_and(|e| e.is_timeout()),
        "{timed_out:?}"
    );
    wait_for_waiters(&mut con, key, 1);
    drop(waiter);
    wait_for_waiters(&mut con, key, 0);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", key, &holder]), 1);
    assert_eq!(int(&mut con, &["EXISTS", key]), 0, "nobody was granted it");

    let key = "lock:short-block";
    let (holder, _) = hold(&mut con, key, 30_000, &[]);
    let mut waiter = server.connect();
    waiter
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(acquire(&mut waiter, key, ttl, &["BLOCK", "100"]), None);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", key, &holder]), 1);
    assert_eq!(int(&mut con, &["EXISTS", key]), 0, "nobody was granted it");
}

/// A holder refreshes its lease while it waits for another lock. Broken: one connection
/// for both: the refresh queued behind the blocked wait is read only when the wait ends,
/// after the lease it refreshes has run out (answered 0: the lock is lost). Kept: the
/// refresh on a connection of its own is answered 1 while the wait still waits.
#[test]
fn a_refresh_queued_behind_a_wait_arrives_after_the_lease_ended() {
    let server = Server::start();
    let mut con = server.connect();
    let (other, _) = hold(&mut con, "lock:b", 60_000, &[]);
    let token = random_token();

    let mut shared = RawClient::connect(server.port);
    let held = shared.call_str(&["LOCK.ACQUIRE", "lock:a", "1000", "TOKEN", &token]);
    assert!(grant_of(&held).is_some());
    shared.send_pipeline(&[
        &["LOCK.ACQUIRE", "lock:b", "60000", "BLOCK", "60000"],
        &["LOCK.REFRESH", "lock:a", &token, "60000"],
    ]);
    wait_for_waiters(&mut con, "lock:b", 1);
    eventually(Duration::from_secs(20), "lock:a's lease ends", || {
        int(&mut con, &["EXISTS", "lock:a"]) == 0
    });
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "lock:b", &other]), 1);
    assert!(
        grant_of(&shared.read_reply()).is_some(),
        "the wait is granted"
    );
    assert_eq!(
        shared.read_reply(),
        Reply::Integer(0),
        "the refresh came too late"
    );

    let (other, _) = hold(&mut con, "lock:d", 60_000, &[]);
    let mut waiting = RawClient::connect(server.port);
    let held = waiting.call_str(&["LOCK.ACQUIRE", "lock:c", "30000", "TOKEN", &token]);
    assert!(grant_of(&held).is_some());
    send(
        &mut waiting,
        &["LOCK.ACQUIRE", "lock:d", "60000", "BLOCK", "60000"],
    );
    wait_for_waiters(&mut con, "lock:d", 1);
    let mut refresher = server.connect();
    assert_eq!(
        int(&mut refresher, &["LOCK.REFRESH", "lock:c", &token, "60000"]),
        1
    );
    assert_eq!(waiters(&mut con, "lock:d"), 1, "while the wait still waits");
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "lock:d", &other]), 1);
    assert!(grant_of(&waiting.read_reply()).is_some());
}
