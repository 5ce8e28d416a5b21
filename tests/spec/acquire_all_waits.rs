//! A blocked `LOCK.ACQUIREALL` against the keys it waits for: a wait for several keys
//! stays waiting while one of them holds another value (never overwriting it, on the
//! replica neither); a blocked request for one key is answered with a list of fences,
//! the shape of `LOCK.ACQUIREALL`, not of `LOCK.ACQUIRE`; and a request for many keys,
//! queued behind others for the same keys, opens each key about once.

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

/// The fences of a `[token, [fences]]` reply.
fn fences(reply: &Reply) -> Vec<i64> {
    match reply {
        Reply::Array(Some(items)) => match items.as_slice() {
            [Reply::Bulk(Some(_)), Reply::Array(Some(fences))] => {
                fences.iter().filter_map(Reply::integer).collect()
            }
            _ => panic!("not [token, [fences]]: {reply:?}"),
        },
        other => panic!("not [token, [fences]]: {other:?}"),
    }
}

#[test]
fn a_key_that_holds_another_value_keeps_a_wait_for_several_keys_waiting() {
    let (primary, replica) = primary_and_replica();
    let mut con = primary.connect();
    let (_, _) = acquire(&mut con, "a", 10_000, &["TOKEN", "x"]).unwrap();
    let (_, _) = acquire(&mut con, "b", 10_000, &["TOKEN", "y"]).unwrap();
    let mut waiter = RawClient::connect(primary.port);
    let argv = [
        "LOCK.ACQUIREALL",
        "2",
        "a",
        "b",
        "10000",
        "TOKEN",
        "w",
        "BLOCK",
        "0",
    ];
    waiter.send(&argv.map(str::as_bytes));
    wait_for_waiters(&mut con, "a", 1);
    cmd("SET").arg("a").arg("user-data").exec(&mut con).unwrap();
    int(&mut con, &["LOCK.RELEASE", "b", "y"]);
    assert_eq!(waiter.try_read_reply(Duration::from_millis(300)), None);
    let kept: String = cmd("GET").arg("a").query(&mut con).unwrap();
    assert_eq!(kept, "user-data");
    assert_eq!(int(&mut con, &["EXISTS", "b"]), 0, "no partial holding");
    wait_replicated(&mut con);
    let mut on_replica = replica.connect();
    assert_eq!(digest(&mut con), digest(&mut on_replica));
    // Once the value is gone, the wait takes both.
    int(&mut con, &["DEL", "a"]);
    assert_eq!(fences(&waiter.read_reply()).len(), 2);
    wait_replicated(&mut con);
    assert_eq!(digest(&mut con), digest(&mut on_replica));
}

#[test]
fn a_blocked_request_for_one_key_is_answered_with_a_list_of_fences() {
    let server = Server::start();
    let mut con = server.connect();
    let (holder, _) = acquire(&mut con, "b", 10_000, &[]).unwrap();
    let mut waiter = RawClient::connect(server.port);
    let argv = [
        "LOCK.ACQUIREALL",
        "1",
        "b",
        "10000",
        "TOKEN",
        "w",
        "BLOCK",
        "0",
    ];
    waiter.send(&argv.map(str::as_bytes));
    wait_for_waiters(&mut con, "b", 1);
    // The same token waiting again on another connection: renewed with the grant.
    let mut retry = RawClient::connect(server.port);
    retry.send(&argv.map(str::as_bytes));
    wait_for_waiters(&mut con, "b", 2);
    int(&mut con, &["LOCK.RELEASE", "b", &holder]);
    let granted = fences(&waiter.read_reply());
    assert_eq!(granted.len(), 1);
    assert_eq!(fences(&retry.read_reply()), granted);
}

#[test]
fn a_request_for_many_keys_behind_others_costs_about_one_open_a_key() {
    let server = Server::start();
    let mut con = server.connect();
    cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-keys")
        .arg("512")
        .exec(&mut con)
        .unwrap();
    let keys: Vec<String> = (0..512).map(|i| format!("k{i}")).collect();
    // The last key is held: every wait for all of them waits for it.
    acquire(&mut con, "k511", 600_000, &[]).unwrap();
    let request = |token: &str| {
        let mut argv: Vec<String> = vec!["LOCK.ACQUIREALL".into(), "512".into()];
        argv.extend(keys.iter().cloned());
        argv.extend(["60000", "TOKEN", token, "BLOCK", "0"].map(String::from));
        argv
    };
    let mut waiting = Vec::new();
    for i in 0..20 {
        let mut client = RawClient::connect(server.port);
        let argv = request(&format!("t{i}"));
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        client.send(&argv);
        waiting.push(client);
    }
    wait_for_waiters(&mut con, "k0", 20);
    // Timed on requests that do not block: each still settles all 512 queues first.
    // In the server's CPU time: a request of several ms is longer than the scheduler
    // lets the server run on a busy machine, where its wall time stretches.
    let mut asker = RawClient::connect(server.port);
    let argv = request("asker");
    let without_block: Vec<&[u8]> = argv[..argv.len() - 2]
        .iter()
        .map(|a| a.as_bytes())
        .collect();
    let before = server.cpu_time();
    for _ in 0..20 {
        assert!(asker.call(&without_block).is_nil());
    }
    let per_call = (server.cpu_time() - before).as_secs_f64() * 1e6 / 20.0;
    // Opening every key once per key was 40 ms at 256 keys with two waiters queued.
    assert!(per_call < 5_000.0, "{per_call:.0} µs a request of 512 keys");
}
