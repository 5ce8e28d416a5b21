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

fn used_memory(raw: &mut RawClient) -> i64 {
    let Reply::Bulk(Some(info)) = raw.call_str(&["INFO", "memory"]) else {
        panic!("INFO memory")
    };
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|value| value.trim().parse().ok())
        .expect("used_memory")
}

fn info(raw: &mut RawClient, field: &str) -> String {
    let Reply::Bulk(Some(info)) = raw.call_str(&["INFO", "fencelock"]) else {
        panic!("INFO fencelock")
    };
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")).map(str::to_owned))
        .unwrap_or_else(|| panic!("{field} missing"))
}

#[test]
fn an_evicted_lock_is_announced_and_its_waiter_served() {
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
    // Only the lock has an expiry, so volatile-lru can evict nothing else.
    set(&mut raw, "maxmemory-policy", "volatile-lru");
    let limit = used_memory(&mut raw) + 200_000;
    set(&mut raw, "maxmemory", &limit.to_string());
    assert_eq!(info(&mut raw, "fencelock_eviction_possible"), "1");
    let filler = "x".repeat(10_000);
    for i in 0..100 {
        // Refused with OOM once nothing volatile is left: fine, the lock went first.
        raw.call_str(&["SET", &format!("filler:{i}"), &filler]);
        // Stop at the first eviction: the lock handed to the waiter is volatile too.
        if info(&mut raw, "fencelock_evicted") != "0" {
            break;
        }
    }
    let granted = waiter
        .try_read_reply(Duration::from_secs(5))
        .expect("the waiter is served when the lock is evicted");
    assert_eq!(
        granted.grant().map(|(token, _)| token.to_vec()),
        Some(b"next".to_vec())
    );
    assert_eq!(info(&mut raw, "fencelock_evicted"), "1");
    let mut seen = Vec::new();
    while let Some(Reply::Array(Some(message))) = subscriber.try_read_reply(Duration::from_secs(1))
    {
        if let Some(Reply::Bulk(Some(event))) = message.last() {
            seen.push(String::from_utf8_lossy(event).into_owned());
        }
        if seen.iter().any(|event| event == "lock.evicted") {
            break;
        }
    }
    assert!(seen.iter().any(|event| event == "lock.evicted"), "{seen:?}");
    set(&mut raw, "maxmemory", "0");
}
