//! A holder's public value and watching a lock without taking it: `LOCK.ACQUIRE …
//! VALUE`, `LOCK.PROCLAIM`, `LOCK.OBSERVE` (its replies, what wakes it, exactly once,
//! timeouts, `CLIENT UNBLOCK`, disconnects, MULTI, limits), `LOCK.INFO`'s `value`, the
//! value across reloads and on a replica, INFO and events.

use std::time::{Duration, Instant};

use testkit::resp::{RawClient, Reply};
use testkit::*;

fn bulk(text: &str) -> Reply {
    Reply::Bulk(Some(text.as_bytes().to_vec()))
}

/// `[fence, value]` as `LOCK.OBSERVE` replies it (`None`: nil value).
fn state(fence: i64, value: Option<&str>) -> Reply {
    Reply::Array(Some(vec![
        Reply::Integer(fence),
        value.map_or(Reply::Bulk(None), bulk),
    ]))
}

/// The replica removed the (only) expired key too, and agrees with the primary.
fn assert_replica_dropped_it(primary: &mut Connection, replica: &mut Connection) {
    eventually(
        Duration::from_secs(5),
        "the replica drops the expired key",
        || int(replica, &["DBSIZE"]) == 0,
    );
    assert_eq!(digest(primary), digest(replica));
}

fn raw(server: &Server) -> RawClient {
    RawClient::connect(server.port)
}

/// An observer on its own connection, blocked with `known` (fence, value).
fn observer(server: &Server, key: &str, known: (i64, &str)) -> RawClient {
    let mut client = raw(server);
    let fence = known.0.to_string();
    client.send_pipeline(&[&["LOCK.OBSERVE", key, &fence, known.1, "BLOCK", "0"]]);
    client
}

fn observers_waiting(con: &mut Connection) -> i64 {
    info_field(con, "fencelock", "fencelock_observers")
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

fn wait_for_observers(con: &mut Connection, n: i64) {
    eventually(Duration::from_secs(5), "observers to block", || {
        observers_waiting(con) == n
    });
}

/// No reply within a short while: still blocked.
fn assert_still_blocked(client: &mut RawClient) {
    assert_eq!(client.try_read_reply(Duration::from_millis(50)), None);
}

#[test]
fn observe_shows_the_holder_fence_and_value_or_nobody() {
    let server = Server::start();
    let mut c = raw(&server);
    assert_eq!(c.call_str(&["LOCK.OBSERVE", "job"]), state(0, None));
    let grant = c.call_str(&["LOCK.ACQUIRE", "job", "10000", "VALUE", "10.0.0.7:8080"]);
    let (_, fence) = grant.grant().expect("granted");
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "job"]),
        state(fence, Some("10.0.0.7:8080"))
    );
    // A holder that set no value shows "".
    let (_, plain) = c
        .call_str(&["LOCK.ACQUIRE", "plain", "10000"])
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .unwrap();
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "plain"]),
        state(plain, Some(""))
    );
    // Readers: the highest live fence, no value.
    c.call_str(&["LOCK.ACQUIRE", "rw", "10000", "SHARED"]);
    let (_, second) = c
        .call_str(&["LOCK.ACQUIRE", "rw", "10000", "SHARED"])
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .unwrap();
    assert_eq!(c.call_str(&["LOCK.OBSERVE", "rw"]), state(second, None));
    // Past the lease, in its lock-delay: nobody holds it.
    c.call_str(&[
        "LOCK.ACQUIRE",
        "q",
        "50",
        "LOCKDELAY",
        "10000",
        "VALUE",
        "v",
    ]);
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(c.call_str(&["LOCK.OBSERVE", "q"]), state(0, None));
    c.call_str(&["SET", "s", "x"]);
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "s"]),
        testkit::resp::err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
}

#[test]
fn a_known_state_answers_only_when_it_differs() {
    let server = Server::start();
    let mut c = raw(&server);
    // The free state is known as `0 ""`; without BLOCK an unchanged state is nil.
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "0", ""]),
        Reply::Bulk(None)
    );
    let (_, fence) = c
        .call_str(&["LOCK.ACQUIRE", "k", "10000", "VALUE", "a"])
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .unwrap();
    let f = fence.to_string();
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "0", ""]),
        state(fence, Some("a"))
    );
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", &f, "a"]),
        Reply::Bulk(None)
    );
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", &f, "b", "BLOCK", "0"]),
        state(fence, Some("a")),
        "another value differs"
    );
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "1", "a", "BLOCK", "0"]),
        state(fence, Some("a")),
        "another fence differs"
    );
    let started = Instant::now();
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", &f, "a", "BLOCK", "100"]),
        Reply::Bulk(None),
        "the timeout passes"
    );
    assert!(started.elapsed() >= Duration::from_millis(90));
}

#[test]
fn proclaim_changes_the_value_not_the_fence_or_lease_and_wakes_each_observer_once() {
    let server = Server::start();
    let mut con = server.connect();
    let mut c = raw(&server);
    let grant = c.call_str(&[
        "LOCK.ACQUIRE",
        "leader",
        "60000",
        "TOKEN",
        "t1",
        "VALUE",
        "a",
    ]);
    let (_, fence) = grant.grant().unwrap();
    let mut observers: Vec<RawClient> = (0..20)
        .map(|_| observer(&server, "leader", (fence, "a")))
        .collect();
    wait_for_observers(&mut con, 20);
    for o in &mut observers {
        assert_still_blocked(o);
    }
    let ttl_before = int(&mut con, &["PTTL", "leader"]);
    assert_eq!(int(&mut con, &["LOCK.PROCLAIM", "leader", "t1", "b"]), 1);
    for o in &mut observers {
        assert_eq!(o.read_reply(), state(fence, Some("b")));
        // Exactly once: nothing more arrives.
        assert_eq!(o.try_read_reply(Duration::from_millis(20)), None);
    }
    assert_eq!(observers_waiting(&mut con), 0);
    assert_eq!(fence_of(&mut con, "leader", "t1"), Some(fence));
    assert!(int(&mut con, &["PTTL", "leader"]) <= ttl_before);
    assert_eq!(
        lock_info(&mut con, "leader").and_then(|info| info.get("value").cloned()),
        Some(Value::BulkString(b"b".to_vec()))
    );
    // Only the holder's token proclaims; the same value again changes nothing.
    assert_eq!(int(&mut con, &["LOCK.PROCLAIM", "leader", "t2", "c"]), 0);
    assert_eq!(int(&mut con, &["LOCK.PROCLAIM", "free", "t1", "c"]), 0);
    let mut same = observer(&server, "leader", (fence, "b"));
    wait_for_observers(&mut con, 1);
    assert_eq!(int(&mut con, &["LOCK.PROCLAIM", "leader", "t1", "b"]), 1);
    assert_still_blocked(&mut same);
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_proclaims").as_deref(),
        Some("1")
    );
    // An empty value is none: shown as "".
    assert_eq!(int(&mut con, &["LOCK.PROCLAIM", "leader", "t1", ""]), 1);
    assert_eq!(same.read_reply(), state(fence, Some("")));
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_observed").as_deref(),
        Some("21")
    );
}

#[test]
fn observers_wake_on_every_kind_of_change() {
    let server = Server::start();
    let mut con = server.connect();
    let mut c = raw(&server);
    let grant = |c: &mut RawClient, key: &str, extra: &[&str]| -> i64 {
        let mut argv = vec!["LOCK.ACQUIRE", key, "60000"];
        argv.extend_from_slice(extra);
        c.call_str(&argv).grant().expect("granted").1
    };
    // Release, and the handoff to a waiter in the same step: one answer, the new holder.
    let first = grant(&mut c, "k", &["TOKEN", "a", "VALUE", "a"]);
    let mut waiter = raw(&server);
    waiter.send_pipeline(&[&[
        "LOCK.ACQUIRE",
        "k",
        "60000",
        "TOKEN",
        "b",
        "BLOCK",
        "0",
        "VALUE",
        "b",
    ]]);
    wait_for_waiters(&mut con, "k", 1);
    let mut o = observer(&server, "k", (first, "a"));
    wait_for_observers(&mut con, 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", "a"]), 1);
    let (_, second) = waiter
        .read_reply()
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .unwrap();
    assert_eq!(o.read_reply(), state(second, Some("b")));
    // DEL.
    let mut o = observer(&server, "k", (second, "b"));
    wait_for_observers(&mut con, 1);
    assert_eq!(int(&mut con, &["DEL", "k"]), 1);
    assert_eq!(o.read_reply(), state(0, None));
    // Expiry, without anything touching the key.
    let short = grant(&mut c, "e", &[]);
    c.call_str(&["PEXPIRE", "e", "100"]);
    // Nothing touches `e` again: that the observer is answered at all shows the lease's
    // end woke it.
    let mut o = observer(&server, "e", (short, ""));
    assert_eq!(o.read_reply(), state(0, None));
    // The end of a lease kept in its lock-delay.
    let d = c.call_str(&[
        "LOCK.ACQUIRE",
        "d2",
        "100",
        "LOCKDELAY",
        "5000",
        "VALUE",
        "v",
    ]);
    let (_, d2) = d.grant().unwrap();
    let mut o = observer(&server, "d2", (d2, "v"));
    assert_eq!(o.read_reply(), state(0, None));
    // A grant on a free key.
    let mut o = observer(&server, "g", (0, ""));
    wait_for_observers(&mut con, 1);
    let granted = grant(&mut c, "g", &["VALUE", "new"]);
    assert_eq!(o.read_reply(), state(granted, Some("new")));
    // RENAME: the source is gone, the destination holds the lock.
    let mut from = observer(&server, "g", (granted, "new"));
    let mut to = observer(&server, "g2", (0, ""));
    wait_for_observers(&mut con, 2);
    assert!(c.call_str(&["RENAME", "g", "g2"]).is_ok());
    assert_eq!(from.read_reply(), state(0, None));
    assert_eq!(to.read_reply(), state(granted, Some("new")));
    // MOVE to another database, and SWAPDB back.
    let mut here = observer(&server, "g2", (granted, "new"));
    wait_for_observers(&mut con, 1);
    assert_eq!(c.call_str(&["MOVE", "g2", "1"]), Reply::Integer(1));
    assert_eq!(here.read_reply(), state(0, None));
    let mut back = observer(&server, "g2", (0, ""));
    wait_for_observers(&mut con, 1);
    assert!(c.call_str(&["SWAPDB", "0", "1"]).is_ok());
    assert_eq!(back.read_reply(), state(granted, Some("new")));
    // FLUSHALL, and an overwrite by another type.
    let mut flushed = observer(&server, "g2", (granted, "new"));
    wait_for_observers(&mut con, 1);
    assert!(c.call_str(&["FLUSHALL"]).is_ok());
    assert_eq!(flushed.read_reply(), state(0, None));
    let held = grant(&mut c, "o", &[]);
    let mut overwritten = observer(&server, "o", (held, ""));
    wait_for_observers(&mut con, 1);
    assert!(c.call_str(&["SET", "o", "text"]).is_ok());
    assert_eq!(
        overwritten.read_reply(),
        testkit::resp::err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(observers_waiting(&mut con), 0);
}

#[test]
fn a_transaction_is_observed_as_it_ends() {
    let server = Server::start();
    let mut con = server.connect();
    let mut c = raw(&server);
    let (_, fence) = c
        .call_str(&["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "VALUE", "a"])
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .unwrap();
    let mut o = observer(&server, "k", (fence, "a"));
    wait_for_observers(&mut con, 1);
    c.send_pipeline(&[
        &["MULTI"],
        &["LOCK.PROCLAIM", "k", "t", "b"],
        &["LOCK.PROCLAIM", "k", "t", "c"],
        &["EXEC"],
    ]);
    for _ in 0..4 {
        c.read_reply();
    }
    assert_eq!(
        o.read_reply(),
        state(fence, Some("c")),
        "the state EXEC left"
    );
    assert_eq!(o.try_read_reply(Duration::from_millis(20)), None);
    // Inside MULTI an observer never blocks: an unchanged state is nil.
    let f = fence.to_string();
    c.send_pipeline(&[
        &["MULTI"],
        &["LOCK.OBSERVE", "k", &f, "c", "BLOCK", "0"],
        &["LOCK.OBSERVE", "k", &f, "x", "BLOCK", "0"],
        &["EXEC"],
    ]);
    for _ in 0..3 {
        c.read_reply();
    }
    assert_eq!(
        c.read_reply(),
        Reply::Array(Some(vec![Reply::Bulk(None), state(fence, Some("c"))]))
    );
}

#[test]
fn timeouts_unblock_and_disconnects_leave_no_observer_behind() {
    let server = Server::start();
    let mut con = server.connect();
    let mut c = raw(&server);
    let started = Instant::now();
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "0", "", "BLOCK", "150"]),
        Reply::Bulk(None)
    );
    assert!(started.elapsed() >= Duration::from_millis(140));
    let mut unblocked = observer(&server, "k", (0, ""));
    wait_for_observers(&mut con, 1);
    let id = unblocked_client_id(&mut con);
    assert_eq!(int(&mut con, &["CLIENT", "UNBLOCK", &id]), 1);
    assert_eq!(unblocked.read_reply(), Reply::Bulk(None));
    let mut errored = observer(&server, "k", (0, ""));
    wait_for_observers(&mut con, 1);
    let id = unblocked_client_id(&mut con);
    assert_eq!(int(&mut con, &["CLIENT", "UNBLOCK", &id, "ERROR"]), 1);
    assert!(matches!(errored.read_reply(), Reply::Error(e) if e.starts_with("UNBLOCKED")));
    for _ in 0..50 {
        drop(observer(&server, "k", (0, "")));
    }
    wait_for_observers(&mut con, 0);
    // The key changes with nobody left to answer.
    assert!(acquire(&mut con, "k", 1000, &[]).is_some());
    assert_eq!(observers_waiting(&mut con), 0);
}

fn unblocked_client_id(con: &mut Connection) -> String {
    let clients: String = cmd("CLIENT").arg("LIST").query(con).unwrap();
    clients
        .lines()
        .find(|line| line.contains("cmd=lock.observe") && line.contains("flags=b"))
        .and_then(|line| line.split(' ').next())
        .and_then(|id| id.strip_prefix("id="))
        .expect("a blocked observer")
        .to_string()
}

#[test]
fn observers_count_against_max_waiters() {
    let server = Server::start();
    let mut con = server.connect();
    assert!(cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-waiters")
        .arg(2)
        .query::<String>(&mut con)
        .is_ok());
    let (_token, _) = acquire(&mut con, "k", 60_000, &["TOKEN", "h"]).unwrap();
    let fence = fence(&mut con, "k").unwrap();
    let _a = observer(&server, "k", (fence, ""));
    let mut waiter = raw(&server);
    waiter.send_pipeline(&[&["LOCK.ACQUIRE", "k", "1000", "BLOCK", "0"]]);
    wait_for_observers(&mut con, 1);
    wait_for_waiters(&mut con, "k", 1);
    let mut c = raw(&server);
    let f = fence.to_string();
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", &f, "", "BLOCK", "0"]),
        testkit::resp::err("ERR too many waiters")
    );
    assert_eq!(
        c.call_str(&["LOCK.ACQUIRE", "k", "1000", "BLOCK", "0"]),
        testkit::resp::err("ERR too many waiters")
    );
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut c = raw(&server);
    let err = testkit::resp::err;
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE"]),
        err("ERR wrong number of arguments for 'lock.observe' command")
    );
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "1"]),
        err("ERR syntax error")
    );
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "-1", "v"]),
        err("ERR invalid fence")
    );
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "x", "v"]),
        err("ERR invalid fence")
    );
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "1", "v", "BLOCK", "-1"]),
        err("ERR timeout is negative")
    );
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "k", "1", "v", "WAIT", "1"]),
        err("ERR syntax error")
    );
    assert_eq!(
        c.call_str(&["LOCK.ACQUIRE", "k", "1000", "SHARED", "VALUE", "v"]),
        err("WRONGMODE only an exclusive holding carries a value")
    );
    assert_eq!(
        c.call_str(&["LOCK.ACQUIRE", "k", "1000", "LIMIT", "3", "VALUE", "v"]),
        err("WRONGMODE only an exclusive holding carries a value")
    );
    let too_long = "v".repeat(1025);
    let value_error = err("ERR value exceeds maximum allowed size (fencelock.max-value-length)");
    assert_eq!(
        c.call_str(&["LOCK.ACQUIRE", "k", "1000", "VALUE", &too_long]),
        value_error
    );
    assert_eq!(c.call_str(&["EXISTS", "k"]), Reply::Integer(0));
    assert!(c
        .call_str(&[
            "LOCK.ACQUIRE",
            "k",
            "60000",
            "TOKEN",
            "t",
            "VALUE",
            &"v".repeat(1024)
        ])
        .grant()
        .is_some());
    assert_eq!(
        c.call_str(&["LOCK.PROCLAIM", "k", "t", &too_long]),
        value_error
    );
    assert_eq!(
        c.call_str(&["LOCK.PROCLAIM", "k", "t"]),
        err("ERR wrong number of arguments for 'lock.proclaim' command")
    );
    assert_eq!(
        c.call_str(&["LOCK.PROCLAIM", "k", "", "v"]),
        err("ERR invalid token")
    );
    c.call_str(&["LOCK.ACQUIRE", "r", "60000", "SHARED", "TOKEN", "t"]);
    assert_eq!(
        c.call_str(&["LOCK.PROCLAIM", "r", "t", "v"]),
        err("WRONGMODE r is held shared")
    );
    c.call_str(&["SET", "s", "x"]);
    assert_eq!(
        c.call_str(&["LOCK.PROCLAIM", "s", "t", "v"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    // The value kept its 1024 bytes through all of it.
    let observed = c.call_str(&["LOCK.OBSERVE", "k"]);
    let Reply::Array(Some(items)) = observed else {
        panic!("{observed:?}")
    };
    assert_eq!(items[1].bulk().map(<[u8]>::len), Some(1024));
    // The limit is a config; 0 allows no value at all.
    assert!(c
        .call_str(&["CONFIG", "SET", "fencelock.max-value-length", "0"])
        .is_ok());
    assert_eq!(
        c.call_str(&["LOCK.ACQUIRE", "z", "1000", "VALUE", "v"]),
        value_error
    );
    assert!(c
        .call_str(&["LOCK.ACQUIRE", "z", "1000", "VALUE", ""])
        .grant()
        .is_some());
}

#[test]
fn a_same_token_retry_with_a_value_sets_it_and_a_waiter_gets_its_own() {
    let server = Server::start();
    let mut c = raw(&server);
    let first = c.call_str(&["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "VALUE", "a"]);
    let (_, fence) = first.grant().unwrap();
    let again = c.call_str(&["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "VALUE", "b"]);
    assert_eq!(again.grant().map(|(_, f)| f), Some(fence));
    assert_eq!(c.call_str(&["LOCK.OBSERVE", "k"]), state(fence, Some("b")));
    let kept = c.call_str(&["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t"]);
    assert_eq!(kept.grant().map(|(_, f)| f), Some(fence));
    assert_eq!(c.call_str(&["LOCK.OBSERVE", "k"]), state(fence, Some("b")));
}

#[test]
fn the_value_survives_reloads_and_aof_rewrites() {
    let server = Server::with_args(&["appendonly", "yes", "aof-use-rdb-preamble", "no"]);
    let mut con = server.connect();
    let mut c = raw(&server);
    let delayed = c.call_str(&[
        "LOCK.ACQUIRE",
        "d",
        "60000",
        "SESSION",
        "s1",
        "LOCKDELAY",
        "500",
        "VALUE",
        "with everything",
    ]);
    let (_, d) = delayed.grant().unwrap();
    let (_, k) = c
        .call_str(&["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "VALUE", "a"])
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .unwrap();
    assert_eq!(int(&mut con, &["LOCK.PROCLAIM", "k", "t", "b c"]), 1);
    let before = digest(&mut con);
    rewrite_aof(&mut con, Duration::from_secs(10));
    let _: () = cmd("DEBUG").arg("LOADAOF").query(&mut con).unwrap();
    assert_eq!(digest(&mut con), before);
    assert_eq!(c.call_str(&["LOCK.OBSERVE", "k"]), state(k, Some("b c")));
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(digest(&mut con), before);
    assert_eq!(
        c.call_str(&["LOCK.OBSERVE", "d"]),
        state(d, Some("with everything"))
    );
    assert_eq!(c.call_str(&["LOCK.OBSERVE", "k"]), state(k, Some("b c")));
}

#[test]
fn a_replica_has_the_value_and_its_observers_hear_replication() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = raw(&replica);
    let (_, fence) = acquire(&mut p, "leader", 60_000, &["TOKEN", "t", "VALUE", "a"]).unwrap();
    wait_replicated(&mut p);
    assert_eq!(
        r.call_str(&["LOCK.OBSERVE", "leader"]),
        state(fence, Some("a"))
    );
    let mut o = observer(&replica, "leader", (fence, "a"));
    let mut rc = replica.connect();
    wait_for_observers(&mut rc, 1);
    assert_eq!(int(&mut p, &["LOCK.PROCLAIM", "leader", "t", "b"]), 1);
    assert_eq!(o.read_reply(), state(fence, Some("b")));
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut rc));
    let mut o = observer(&replica, "leader", (fence, "b"));
    wait_for_observers(&mut rc, 1);
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "leader", "t"]), 1);
    assert_eq!(o.read_reply(), state(0, None));
    // An expiry the primary's observers find first still reaches the replica as a DEL.
    let (_, short) = acquire(&mut p, "short", 100, &["VALUE", "v"]).unwrap();
    let mut on_primary = observer(&primary, "short", (short, "v"));
    assert_eq!(on_primary.read_reply(), state(0, None));
    assert_replica_dropped_it(&mut p, &mut rc);
}

#[test]
fn a_proclaim_is_announced() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "k", 60_000, &["TOKEN", "t"]).unwrap();
    let mut events = keyspace_subscriber(&server, &mut con, &["SUBSCRIBE", "__keyspace@0__:k"]);
    assert_eq!(int(&mut con, &["LOCK.PROCLAIM", "k", "t", "v"]), 1);
    let Reply::Array(Some(message)) = events.read_reply() else {
        panic!("a keyspace message");
    };
    assert_eq!(message.last(), Some(&bulk("lock.proclaimed")));
}

#[test]
fn a_key_that_expired_unnoticed_is_removed_everywhere_when_observers_look() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut rc = replica.connect();
    without_active_expiry(&mut p);
    let mut c = raw(&primary);
    assert!(c.call_str(&["SELECT", "1"]).is_ok());
    assert!(c
        .call_str(&["LOCK.ACQUIRE", "k", "50", "VALUE", "v"])
        .grant()
        .is_some());
    // An observer of `k` in database 0, where nothing holds it.
    let mut o = observer(&primary, "k", (0, ""));
    wait_for_observers(&mut p, 1);
    std::thread::sleep(Duration::from_millis(100));
    // The expired lock (nobody touched it, active expiry is off) comes to database 0:
    // the observers' look finds it expired, and its DEL must reach the replica.
    assert!(c.call_str(&["SWAPDB", "0", "1"]).is_ok());
    assert_still_blocked(&mut o);
    wait_replicated(&mut p);
    assert_replica_dropped_it(&mut p, &mut rc);
}

#[test]
fn acquireall_gives_every_key_the_value() {
    let server = Server::start();
    let mut c = raw(&server);
    let Reply::Array(Some(grant)) = c.call_str(&[
        "LOCK.ACQUIREALL",
        "2",
        "{g}a",
        "{g}b",
        "10000",
        "VALUE",
        "node-1",
    ]) else {
        panic!("granted");
    };
    let Reply::Array(Some(fences)) = &grant[1] else {
        panic!("fences");
    };
    for (key, fence) in ["{g}a", "{g}b"].iter().zip(fences) {
        let fence = fence.integer().unwrap();
        assert_eq!(
            c.call_str(&["LOCK.OBSERVE", key]),
            state(fence, Some("node-1"))
        );
    }
    assert_eq!(
        c.call_str(&[
            "LOCK.ACQUIREALL",
            "2",
            "{g}c",
            "{g}d",
            "10000",
            "SHARED",
            "VALUE",
            "v"
        ]),
        testkit::resp::err("WRONGMODE only an exclusive holding carries a value")
    );
}

#[test]
fn a_shared_holder_whose_lease_ends_into_its_lock_delay_is_heard_at_the_lease_end() {
    let server = Server::start();
    let mut c = raw(&server);
    let long = c.call_str(&["LOCK.ACQUIRE", "k", "10000", "LIMIT", "3", "TOKEN", "r1"]);
    let (_, first) = long.grant().unwrap();
    let short = c.call_str(&[
        "LOCK.ACQUIRE",
        "k",
        "200",
        "LIMIT",
        "3",
        "TOKEN",
        "r2",
        "LOCKDELAY",
        "5000",
    ]);
    let (_, second) = short.grant().unwrap();
    let mut o = observer(&server, "k", (second, ""));
    let started = Instant::now();
    assert_eq!(o.read_reply(), state(first, None));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "heard after {:?}, not at the lease's end",
        started.elapsed()
    );
}

#[test]
fn under_oom_a_retry_may_renew_but_not_change_the_value() {
    let server = Server::start();
    let mut c = raw(&server);
    let (_, fence) = c
        .call_str(&["LOCK.ACQUIRE", "k", "600000", "TOKEN", "t", "VALUE", "v1"])
        .grant()
        .map(|(t, f)| (t.to_vec(), f))
        .unwrap();
    assert!(c
        .call_str(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .is_ok());
    assert!(c.call_str(&["CONFIG", "SET", "maxmemory", "1"]).is_ok());
    let oom = testkit::resp::err("OOM command not allowed when used memory > 'maxmemory'.");
    assert_eq!(c.call_str(&["LOCK.PROCLAIM", "k", "t", "v2"]), oom);
    assert_eq!(
        c.call_str(&["LOCK.ACQUIRE", "k", "600000", "TOKEN", "t", "VALUE", "v2"]),
        oom
    );
    let renewed = c.call_str(&["LOCK.ACQUIRE", "k", "600000", "TOKEN", "t", "VALUE", "v1"]);
    assert_eq!(
        renewed.grant().map(|(_, f)| f),
        Some(fence),
        "the same value renews"
    );
    assert!(c.call_str(&["CONFIG", "SET", "maxmemory", "0"]).is_ok());
    assert_eq!(c.call_str(&["LOCK.OBSERVE", "k"]), state(fence, Some("v1")));
}

/// An observer of a leader whose lease is cut short by `how` is answered when the short
/// lease runs out, with Redis's active expiry off: the module's own look at the key
/// (not Redis's expiry cycle, nor the first lease's old end) answers it.
fn observer_of_a_shortened_lease_is_answered_at_its_end(how: &[&str]) {
    let server = Server::start();
    let mut con = server.connect();
    without_active_expiry(&mut con);
    let (_, fence) = acquire(
        &mut con,
        "leader",
        600_000,
        &["TOKEN", "t", "SESSION", "s", "VALUE", "a"],
    )
    .unwrap();
    let mut o = observer(&server, "leader", (fence, "a"));
    wait_for_observers(&mut con, 1);
    let shortened: Value = cmd(how[0]).arg(&how[1..]).query(&mut con).unwrap();
    assert_ne!(shortened, Value::Int(0), "{how:?}");
    assert_still_blocked(&mut o);
    // The old lease had ten minutes left: only a look at the new end answers in time.
    assert_eq!(o.read_reply(), state(0, None), "{how:?}");
}

#[test]
fn an_observer_hears_a_lease_shortened_by_refresh_run_out() {
    observer_of_a_shortened_lease_is_answered_at_its_end(&["LOCK.REFRESH", "leader", "t", "300"]);
}

#[test]
fn an_observer_hears_a_lease_shortened_by_keepalive_run_out() {
    observer_of_a_shortened_lease_is_answered_at_its_end(&["LOCK.KEEPALIVE", "s", "300"]);
}

#[test]
fn an_observer_hears_a_lease_shortened_by_pexpire_run_out() {
    observer_of_a_shortened_lease_is_answered_at_its_end(&["PEXPIRE", "leader", "300"]);
}

#[test]
fn a_proclaim_after_persist_hands_the_lock_on_when_the_holdings_delay_ends() {
    let server = Server::start();
    let mut con = server.connect();
    without_active_expiry(&mut con);
    acquire(
        &mut con,
        "leader",
        1_000,
        &["TOKEN", "t", "LOCKDELAY", "500"],
    )
    .unwrap();
    assert_eq!(int(&mut con, &["PERSIST", "leader"]), 1);
    let mut waiter = raw(&server);
    waiter.send_pipeline(&[&[
        "LOCK.ACQUIRE",
        "leader",
        "10000",
        "TOKEN",
        "next",
        "BLOCK",
        "0",
    ]]);
    wait_for_waiters(&mut con, "leader", 1);
    assert_eq!(
        int(&mut con, &["LOCK.PROCLAIM", "leader", "t", "10.0.0.1:80"]),
        1
    );
    assert!(
        int(&mut con, &["PTTL", "leader"]) > 0,
        "the expiry comes from the holding"
    );
    // Nothing but the module's own timer looks at the key (active expiry is off).
    let reply = waiter.read_reply();
    assert_eq!(
        reply.grant().map(|(token, _)| token.to_vec()),
        Some(b"next".to_vec())
    );
}
