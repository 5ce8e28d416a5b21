//! Under `maxmemory` with an evicting policy the server may evict a lock (it has an
//! expiry, so `volatile-*` policies too): the module handles it like a `DEL` — the
//! queue is served — and says so, with `lock.evicted` and `fencelock_evicted`. INFO's
//! `fencelock_eviction_possible` tells operators that their policy can do this.

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

fn set(raw: &mut RawClient, name: &str, value: &str) {
    assert!(raw.call_str(&["CONFIG", "SET", name, value]).is_ok());
}

fn info(raw: &mut RawClient, field: &str) -> String {
    info_field(raw, "fencelock", field).unwrap_or_else(|| panic!("{field} missing"))
}

/// Every evicting policy can take a lock: `volatile-*` ones because it has an expiry.
#[test]
fn an_evicted_lock_is_announced_and_its_waiter_served() {
    for policy in [
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
        "allkeys-lru",
        "allkeys-random",
    ] {
        evicted_lock_under(policy);
    }
}

fn evicted_lock_under(policy: &str) {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber =
        keyspace_subscriber(&server, &mut con, &["SUBSCRIBE", "__keyspace@0__:lock:a"]);
    let mut raw = RawClient::connect(server.port);
    assert_eq!(info(&mut raw, "fencelock_eviction_possible"), "0");
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "lock:a", "600000", "TOKEN", "holder"])
        .grant()
        .is_some());
    let mut waiter = RawClient::connect(server.port);
    waiter.send(&[
        b"LOCK.ACQUIRE",
        b"lock:a",
        b"60000",
        b"TOKEN",
        b"next",
        b"BLOCK",
        b"0",
    ]);
    let mut watcher = server.connect();
    wait_for_waiters(&mut watcher, "lock:a", 1);
    set(&mut raw, "maxmemory-policy", policy);
    let limit = used_memory(&mut raw) + 200_000;
    set(&mut raw, "maxmemory", &limit.to_string());
    assert_eq!(info(&mut raw, "fencelock_eviction_possible"), "1");
    let filler = "x".repeat(10_000);
    for i in 0..5_000 {
        // Under volatile-* refused with OOM once nothing volatile is left: fine, the
        // lock went first.
        raw.call_str(&["SET", &format!("filler:{i}"), &filler]);
        // Stop at the first eviction: the lock handed to the waiter can go too.
        if info(&mut raw, "fencelock_evicted") != "0" {
            break;
        }
    }
    let granted = waiter
        .try_read_reply(Duration::from_secs(5))
        .expect("the waiter is served when the lock is evicted");
    assert_eq!(
        granted.grant().map(|(token, _)| token.to_vec()),
        Some(b"next".to_vec()),
        "{policy}"
    );
    assert_eq!(info(&mut raw, "fencelock_evicted"), "1", "{policy}");
    assert!(events_seen(&mut subscriber, "lock.evicted"), "{policy}");
    set(&mut raw, "maxmemory", "0");
}

/// Whether the keyspace subscriber hears `event` within a few seconds.
fn events_seen(subscriber: &mut RawClient, event: &str) -> bool {
    let mut seen = Vec::new();
    while let Some(Reply::Array(Some(message))) = subscriber.try_read_reply(Duration::from_secs(1))
    {
        if let Some(Reply::Bulk(Some(name))) = message.last() {
            seen.push(String::from_utf8_lossy(name).into_owned());
        }
        if seen.iter().any(|name| name == event) {
            return true;
        }
    }
    false
}

/// Fills memory under `policy` until `gone` has been evicted, then lifts the limit.
fn evict(raw: &mut RawClient, policy: &str, gone: &str) {
    set(raw, "maxmemory-policy", policy);
    let limit = used_memory(raw) + 200_000;
    set(raw, "maxmemory", &limit.to_string());
    let filler = "x".repeat(10_000);
    for i in 0..5_000 {
        raw.call_str(&["SET", &format!("filler:{i}"), &filler]);
        if raw.call_str(&["EXISTS", gone]).integer() == Some(0) {
            set(raw, "maxmemory", "0");
            return;
        }
    }
    panic!("{policy} never evicted {gone}");
}

fn fenced(raw: &mut RawClient, mark: &str, fence: &str, value: &str) -> Reply {
    raw.call_str(&["LOCK.FENCED", mark, fence, "SET", "ledger", value])
}

fn is_stale(reply: &Reply, highest: u64) -> bool {
    matches!(reply, Reply::Error(message)
        if message == &format!("STALE fence is below the highest admitted ({highest})"))
}

/// The seeds' stale write through an evicted mark: fence 100 admitted, the mark evicted,
/// then fence 50 must still be refused — on this mark and on any mark that is missing,
/// since the server cannot tell a mark it evicted from one never made.
#[test]
fn an_evicted_mark_leaves_a_floor_that_older_fences_cannot_pass() {
    for policy in ["allkeys-lru", "allkeys-lfu", "allkeys-random"] {
        let server = Server::start();
        let mut con = server.connect();
        let mut subscriber = keyspace_subscriber(
            &server,
            &mut con,
            &["SUBSCRIBE", "__keyspace@0__:mark:ledger"],
        );
        let mut raw = RawClient::connect(server.port);
        assert!(fenced(&mut raw, "mark:ledger", "100", "v100").is_ok());
        assert_eq!(info(&mut raw, "fencelock_mark_floor"), "0");
        evict(&mut raw, policy, "mark:ledger");
        assert!(events_seen(&mut subscriber, "mark.evicted"), "{policy}");
        assert_eq!(info(&mut raw, "fencelock_mark_floor"), "100", "{policy}");
        assert_eq!(info(&mut raw, "fencelock_evicted_marks"), "1", "{policy}");
        let stale = fenced(&mut raw, "mark:ledger", "50", "STALE");
        assert!(is_stale(&stale, 100), "{policy}: {stale:?}");
        let other = fenced(&mut raw, "mark:other", "99", "STALE");
        assert!(is_stale(&other, 100), "{policy}: {other:?}");
        assert_ne!(raw.call_str(&["GET", "ledger"]).bulk(), Some(&b"STALE"[..]));
        // The holder of fence 100 may go on writing; the mark is made again at 100.
        assert!(fenced(&mut raw, "mark:ledger", "100", "again").is_ok());
        assert!(is_stale(&fenced(&mut raw, "mark:ledger", "99", "x"), 100));
        assert!(fenced(&mut raw, "mark:new", "101", "v101").is_ok());
    }
}

/// The floor is node state like the fence clock: replicas learn it with the eviction,
/// a promoted replica keeps refusing, and it survives `DEBUG RELOAD`.
#[test]
fn the_mark_floor_replicates_and_reloads() {
    let (primary, replica) = primary_and_replica();
    let mut raw = RawClient::connect(primary.port);
    assert!(fenced(&mut raw, "mark:ledger", "100", "v100").is_ok());
    evict(&mut raw, "allkeys-lru", "mark:ledger");
    wait_replicated(&mut primary.connect());
    assert_eq!(info(&mut raw, "fencelock_mark_floor"), "100");
    let mut on_replica = RawClient::connect(replica.port);
    assert_eq!(
        on_replica.call_str(&["EXISTS", "mark:ledger"]).integer(),
        Some(0)
    );
    assert_eq!(info(&mut on_replica, "fencelock_mark_floor"), "100");
    assert!(on_replica.call_str(&["REPLICAOF", "NO", "ONE"]).is_ok());
    assert!(is_stale(
        &fenced(&mut on_replica, "mark:ledger", "50", "STALE"),
        100
    ));
    assert!(raw.call_str(&["DEBUG", "RELOAD"]).is_ok());
    assert_eq!(info(&mut raw, "fencelock_mark_floor"), "100");
    assert!(is_stale(
        &fenced(&mut raw, "mark:ledger", "50", "STALE"),
        100
    ));
}

/// Kills and restarts `server`, which must come back with the mark floor at `floor`.
fn restarted_with_floor(server: &mut Server, floor: &str, how: &str) -> RawClient {
    server.kill();
    server.restart();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(info(&mut raw, "fencelock_mark_floor"), floor, "{how}");
    raw
}

/// After a restart from the AOF (replayed with and without the RDB preamble, before
/// and after a rewrite) and from an RDB file, the floor still refuses.
#[test]
fn the_mark_floor_survives_restarts() {
    for preamble in ["yes", "no"] {
        let mut server = Server::with_args(&aof_always(preamble));
        let mut raw = RawClient::connect(server.port);
        assert!(fenced(&mut raw, "mark:ledger", "100", "v100").is_ok());
        evict(&mut raw, "allkeys-lru", "mark:ledger");
        let mut raw = restarted_with_floor(&mut server, "100", &format!("replayed, {preamble}"));
        // A rewrite keeps it too (without the preamble: written with the first mark).
        assert!(fenced(&mut raw, "mark:kept", "200", "v200").is_ok());
        let mut con = server.connect();
        rewrite_aof(&mut con, Duration::from_secs(10));
        let mut raw = restarted_with_floor(&mut server, "100", &format!("rewritten, {preamble}"));
        assert!(is_stale(
            &fenced(&mut raw, "mark:ledger", "50", "STALE"),
            100
        ));
    }
    let mut server = Server::with_args(&["save", "3600 1"]);
    let mut raw = RawClient::connect(server.port);
    assert!(fenced(&mut raw, "mark:ledger", "100", "v100").is_ok());
    evict(&mut raw, "allkeys-lru", "mark:ledger");
    server.shutdown();
    server.restart();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(info(&mut raw, "fencelock_mark_floor"), "100", "RDB");
}

/// With every mark evicted and no lock held, nothing in the keyspace carries the floor
/// into an AOF rewritten without the preamble, so the rewrite itself must (also when
/// `CONFIG SET appendonly yes` writes the first AOF).
#[test]
fn the_mark_floor_survives_a_rewrite_that_has_no_module_key() {
    for how in ["rewrite", "appendonly at runtime"] {
        let at_start: &[&str] = if how == "rewrite" {
            &["appendonly", "yes", "aof-use-rdb-preamble", "no"]
        } else {
            &["appendonly", "no", "aof-use-rdb-preamble", "no"]
        };
        let mut server = Server::with_args(at_start);
        let mut raw = RawClient::connect(server.port);
        assert!(fenced(&mut raw, "mark:ledger", "1000", "v").is_ok());
        evict(&mut raw, "allkeys-lru", "mark:ledger");
        assert!(raw.call_str(&["FLUSHALL"]).is_ok());
        let mut con = server.connect();
        if how == "rewrite" {
            rewrite_aof(&mut con, Duration::from_secs(10));
        } else {
            set(&mut raw, "appendonly", "yes");
            eventually(Duration::from_secs(10), "the first AOF written", || {
                info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref()
                    == Some("0")
                    && info_field(&mut con, "persistence", "aof_enabled").as_deref() == Some("1")
            });
            server.kill();
            server.restart_with_args(&["appendonly", "yes", "aof-use-rdb-preamble", "no"]);
            let mut raw = RawClient::connect(server.port);
            assert_eq!(info(&mut raw, "fencelock_mark_floor"), "1000", "{how}");
            continue;
        }
        let mut raw = restarted_with_floor(&mut server, "1000", how);
        assert!(is_stale(
            &fenced(&mut raw, "mark:ledger", "999", "STALE"),
            1000
        ));
    }
}

/// A mark given an expiry by hand is lost when it expires as when it is evicted: its
/// fence joins the floor (only `DEL` forgets a mark on purpose).
#[test]
fn an_expired_mark_leaves_a_floor_too() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    assert!(fenced(&mut raw, "mark:ledger", "100", "v").is_ok());
    assert_eq!(
        raw.call_str(&["PEXPIRE", "mark:ledger", "50"]).integer(),
        Some(1)
    );
    let mut con = server.connect();
    eventually(Duration::from_secs(3), "the mark expired", || {
        int(&mut con, &["EXISTS", "mark:ledger"]) == 0
    });
    assert!(is_stale(
        &fenced(&mut raw, "mark:ledger", "5", "STALE"),
        100
    ));
    assert_eq!(info(&mut raw, "fencelock_mark_floor"), "100");
}

/// An expiry already past deletes a mark at once, which Redis 7.0 and 8.2 announce as a
/// deletion: it still counts as the mark expiring, not as a `DEL`.
#[test]
fn a_mark_given_an_expiry_already_past_leaves_a_floor() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    for (mark, expire) in [
        ("m1", &["EXPIRE", "m1", "-1"][..]),
        ("m2", &["PEXPIREAT", "m2", "1"]),
        ("m3", &["EXPIREAT", "m3", "1"]),
    ] {
        assert!(fenced(&mut raw, mark, "1000", "v").is_ok());
        assert_eq!(raw.call_str(expire).integer(), Some(1), "{expire:?}");
        assert!(
            is_stale(&fenced(&mut raw, mark, "5", "STALE"), 1000),
            "{expire:?}"
        );
    }
    // Inside a script too (a command queued in MULTI runs under EXEC: not told apart).
    assert!(fenced(&mut raw, "m4", "2000", "v").is_ok());
    raw.call_str(&[
        "EVAL",
        "return redis.call('EXPIRE', KEYS[1], -1)",
        "1",
        "m4",
    ]);
    assert_eq!(info(&mut raw, "fencelock_mark_floor"), "2000");
    // DEL is the one way to forget a mark on purpose.
    assert!(fenced(&mut raw, "m5", "3000", "v").is_ok());
    assert_eq!(raw.call_str(&["DEL", "m5"]).integer(), Some(1));
    assert_eq!(info(&mut raw, "fencelock_mark_floor"), "2000");
}
