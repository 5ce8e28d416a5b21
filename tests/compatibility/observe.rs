//! Observers (`LOCK.OBSERVE`) where servers differ or several take part: a cluster
//! routes them by key and tells them to retry where a migrated lock went; a read-only
//! ACL user may observe but not proclaim; a server that becomes another's replica
//! unblocks its observers as it unblocks every blocked client; a restart keeps every
//! value.

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

use crate::acl_categories::set_user;
use crate::cluster::{key_per_node, Cluster, SlotMove};

fn observed(fence: i64, value: Option<&str>) -> Reply {
    Reply::Array(Some(vec![
        Reply::Integer(fence),
        Reply::Bulk(value.map(|v| v.as_bytes().to_vec())),
    ]))
}

fn observers(con: &mut Connection) -> Option<String> {
    info_field(con, "fencelock", "fencelock_observers")
}

#[test]
fn an_observer_of_a_migrated_lock_is_told_to_retry_where_it_went() {
    let cluster = Cluster::start();
    let key = key_per_node(&cluster, "lock:observed")[0].clone();
    let (source, target) = (&cluster.nodes[0], &cluster.nodes[1]);
    let mut from = source.connect();
    let (token, fence) = acquire(&mut from, &key, 30_000, &["VALUE", "node-a"]).unwrap();
    let mut observer = RawClient::connect(source.port);
    let f = fence.to_string();
    observer.send_pipeline(&[&["LOCK.OBSERVE", &key, &f, "node-a", "BLOCK", "0"]]);
    eventually(Duration::from_secs(5), "the observer blocks", || {
        observers(&mut from).as_deref() == Some("1")
    });
    let slot: i64 = slot_of(&mut from, &key);
    let moving = SlotMove::begin(source, target, slot);
    moving.migrate(&mut from, &key);
    moving.finish([1, 0, 2].map(|node| &cluster.nodes[node]));
    match observer.read_reply() {
        Reply::Error(text) => assert!(text.starts_with("TRYAGAIN"), "{text}"),
        other => panic!("the observer heard {other:?} of a lock held elsewhere"),
    }
    assert_eq!(observers(&mut from).as_deref(), Some("0"));
    // Where it went it is the same holding, value and all.
    let mut there = RawClient::connect(target.port);
    assert_eq!(
        there.call_str(&["LOCK.OBSERVE", &key]),
        observed(fence, Some("node-a"))
    );
    let mut client = cluster.client();
    let proclaimed: i64 = cmd("LOCK.PROCLAIM")
        .arg(&key)
        .arg(&token)
        .arg("node-b")
        .query(&mut client)
        .unwrap();
    assert_eq!(
        proclaimed, 1,
        "a cluster client routes LOCK.PROCLAIM by its key"
    );
    let seen: (i64, String) = cmd("LOCK.OBSERVE").arg(&key).query(&mut client).unwrap();
    assert_eq!(seen, (fence, "node-b".to_string()));
}

#[test]
fn a_read_only_user_observes_and_may_not_proclaim() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "lock:a", 60_000, &["TOKEN", "t", "VALUE", "v"]).unwrap();
    set_user(
        &mut con,
        "watcher",
        &["-@all", "+lock.observe", "+lock.proclaim", "%R~lock:*"],
    )
    .unwrap();
    let mut watcher = RawClient::connect(server.port);
    assert!(watcher.call_str(&["AUTH", "watcher", "x"]).is_ok());
    let Reply::Array(Some(state)) = watcher.call_str(&["LOCK.OBSERVE", "lock:a"]) else {
        panic!("a read-only user observes");
    };
    assert_eq!(state[1], Reply::Bulk(Some(b"v".to_vec())));
    match watcher.call_str(&["LOCK.PROCLAIM", "lock:a", "t", "w"]) {
        Reply::Error(text) => assert!(text.starts_with("NOPERM"), "{text}"),
        other => panic!("a read-only user proclaimed: {other:?}"),
    }
}

#[test]
fn a_server_that_becomes_a_replica_unblocks_its_observers_as_it_does_every_blocked_client() {
    let primary = Server::start();
    let mut p = primary.connect();
    let (_, fresh) = acquire(&mut p, "leader", 60_000, &["VALUE", "from-primary"]).unwrap();
    let other = Server::start();
    let mut o = other.connect();
    acquire(&mut o, "leader", 60_000, &["VALUE", "stale"]).unwrap();
    let stale = fence(&mut o, "leader").expect("held").to_string();
    let mut observer = RawClient::connect(other.port);
    observer.send_pipeline(&[&["LOCK.OBSERVE", "leader", &stale, "stale", "BLOCK", "0"]]);
    eventually(Duration::from_secs(5), "the observer blocks", || {
        observers(&mut o).as_deref() == Some("1")
    });
    other.replicate_from(&primary);
    // The server's own rule for every blocked client on a role change.
    match observer.read_reply() {
        Reply::Error(text) => assert!(text.starts_with("UNBLOCKED"), "{text}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(observers(&mut o).as_deref(), Some("0"));
    // The server closes such connections after the error (as for `BLPOP`); observing
    // again with what it knew, a client hears the primary's leader.
    let mut again = RawClient::connect(other.port);
    assert_eq!(
        again.call_str(&["LOCK.OBSERVE", "leader", &stale, "stale", "BLOCK", "0"]),
        observed(fresh, Some("from-primary"))
    );
}

#[test]
fn a_restart_keeps_every_value() {
    let mut server = Server::with_args(&["appendonly", "yes"]);
    let mut con = server.connect();
    let (_, a) = acquire(&mut con, "a", 600_000, &["VALUE", "10.0.0.1:80"]).unwrap();
    let (_, b) = acquire(
        &mut con,
        "b",
        600_000,
        &[
            "SESSION",
            "s",
            "LOCKDELAY",
            "1000",
            "TOKEN",
            "t",
            "VALUE",
            "x",
        ],
    )
    .unwrap();
    assert_eq!(int(&mut con, &["LOCK.PROCLAIM", "b", "t", "y"]), 1);
    let before = digest(&mut con);
    drop(con);
    server.restart();
    let mut con = server.connect();
    assert_eq!(digest(&mut con), before);
    let mut raw = RawClient::connect(server.port);
    assert_eq!(
        raw.call_str(&["LOCK.OBSERVE", "a"]),
        observed(a, Some("10.0.0.1:80"))
    );
    assert_eq!(raw.call_str(&["LOCK.OBSERVE", "b"]), observed(b, Some("y")));
}
