//! Sessions wherever their holdings go: a replica and a promoted replica answer
//! `LOCK.HELD` as the primary did and `LOCK.KEEPALIVE` moves the replica's deadlines;
//! RDB, AOF (with and without the RDB preamble) and `DEBUG RELOAD` bring back every
//! holding with its session; `DUMP`/`RESTORE` and `RENAME` keep it; in a cluster each
//! node keeps its own, and a live `MIGRATE` takes a holding's session to the new owner.

use std::time::Duration;

use testkit::*;

use crate::cluster::{key_per_node, Cluster, SlotMove};

/// A lease restarted at `ttl` a moment ago: `(ttl - 1000, ttl]` ms left.
fn assert_lease(left: i64, ttl: i64, what: &str) {
    assert!(
        left > ttl - 1_000 && left <= ttl,
        "{what}: {left} ms left, want about {ttl}"
    );
}

/// Both lists name the same holdings (key, mode, fence, in order) and their leases
/// agree within `slack` ms (-1 exactly).
fn assert_same_holdings(got: &[Holding], want: &[Holding], slack: i64, what: &str) {
    let ids = |list: &[Holding]| -> Vec<(String, String, i64)> {
        list.iter()
            .map(|h| (h.key.clone(), h.mode.clone(), h.fence))
            .collect()
    };
    assert_eq!(ids(got), ids(want), "{what}");
    for (g, w) in got.iter().zip(want) {
        if w.pttl < 0 {
            assert_eq!(g.pttl, w.pttl, "{what}: {}", g.key);
        } else {
            assert!(
                (g.pttl - w.pttl).abs() <= slack,
                "{what}: {} pttl {} vs {}",
                g.key,
                g.pttl,
                w.pttl
            );
        }
    }
}

/// A session `s` with an exclusive, a shared (beside a reader of no session), a
/// semaphore and a lock-delay holding, one released holding, and a holding of another
/// session `t`.
/// Returns the keys `s` holds, in grant order.
fn populate(con: &mut Connection) -> Vec<&'static str> {
    hold(con, "lock:a", 60_000, &["SESSION", "s", "TOKEN", "a"]);
    hold(
        con,
        "rw",
        50_000,
        &["SESSION", "s", "SHARED", "TOKEN", "r1"],
    );
    hold(con, "rw", 70_000, &["SHARED", "TOKEN", "r2"]);
    hold(
        con,
        "sem",
        40_000,
        &["SESSION", "s", "LIMIT", "3", "TOKEN", "p"],
    );
    hold(con, "lock:gone", 60_000, &["SESSION", "s", "TOKEN", "g"]);
    assert_eq!(int(con, &["LOCK.RELEASE", "lock:gone", "g"]), 1);
    hold(
        con,
        "lock:d",
        60_000,
        &["SESSION", "s", "LOCKDELAY", "5000"],
    );
    hold(con, "lock:t", 60_000, &["SESSION", "t", "TOKEN", "t"]);
    vec!["lock:a", "rw", "sem", "lock:d"]
}

/// Every key's absolute deadline.
fn deadlines(con: &mut Connection, keys: &[&str]) -> Vec<i64> {
    keys.iter().map(|key| expire_time(con, key)).collect()
}

#[test]
fn a_replica_and_a_promoted_replica_answer_held_as_the_primary_did() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let keys = populate(&mut p);
    wait_replicated(&mut p);
    let on_primary = held(&mut p, "s");
    assert_eq!(
        on_primary
            .iter()
            .map(|h| h.key.as_str())
            .collect::<Vec<_>>(),
        keys
    );
    assert_same_holdings(&held(&mut r, "s"), &on_primary, 100, "replica");
    assert_same_holdings(&held(&mut r, "t"), &held(&mut p, "t"), 100, "replica, t");
    assert_eq!(digest(&mut p), digest(&mut r));
    for argv in [vec!["LOCK.KEEPALIVE", "s", "1000"], vec!["LOCK.CLOSE", "s"]] {
        let (name, rest) = argv.split_first().unwrap();
        let refused = cmd(name).arg(rest).query::<Value>(&mut r);
        assert_eq!(
            refused.expect_err("a write").code(),
            Some("READONLY"),
            "{argv:?}"
        );
    }
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    assert_same_holdings(&held(&mut r, "s"), &on_primary, 200, "promoted");
    assert_eq!(keepalive(&mut r, "s", 90_000), 4);
    for holding in held(&mut r, "s") {
        assert_lease(holding.pttl, 90_000, &holding.key);
    }
    assert_eq!(int(&mut r, &["LOCK.CLOSE", "s"]), 4);
    assert_eq!(held(&mut r, "s"), []);
    assert!(
        fence_of(&mut r, "rw", "r2").is_some(),
        "the other reader stays"
    );
    assert_eq!(held(&mut r, "t").len(), 1);
}

#[test]
fn keepalive_and_close_on_the_primary_reach_the_replica_as_effects() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let keys = populate(&mut p);
    wait_replicated(&mut p);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(keepalive(&mut p, "s", 90_000), 4);
    wait_replicated(&mut p);
    let on_primary = deadlines(&mut p, &keys);
    assert_eq!(
        deadlines(&mut r, &keys),
        on_primary,
        "the same absolute deadlines"
    );
    for holding in held(&mut r, "s") {
        assert_lease(holding.pttl, 90_000, &holding.key);
    }
    assert_same_holdings(
        &held(&mut r, "s"),
        &held(&mut p, "s"),
        100,
        "after keepalive",
    );
    assert_eq!(digest(&mut p), digest(&mut r));
    assert_eq!(int(&mut p, &["LOCK.CLOSE", "s"]), 4);
    wait_replicated(&mut p);
    assert_eq!(held(&mut r, "s"), []);
    assert_eq!(int(&mut r, &["EXISTS", "lock:a", "sem", "lock:d"]), 0);
    assert_eq!(fence_of(&mut r, "rw", "r1"), None);
    assert!(fence_of(&mut r, "rw", "r2").is_some());
    assert_eq!(digest(&mut p), digest(&mut r));
}

/// `mode` of `LOCK.INFO key`.
fn info_mode(con: &mut Connection, key: &str) -> Option<String> {
    lock_info(con, key).and_then(|info| redis::from_redis_value(info["mode"].clone()).ok())
}

/// A lease with a lock-delay that runs out on the primary is quarantined on its replica
/// too, through a promotion and a reload: no server grants the key before the delay
/// ends, and every one ends it at the same moment.
#[test]
fn a_quarantine_holds_on_the_replica_after_promotion_and_across_a_reload() {
    // Long enough that the checks below, on a busy machine too, all fall within it (the
    // test does not wait for its end).
    const DELAY: i64 = 5_000;
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    hold(
        &mut p,
        "lock:k",
        200,
        &["SESSION", "s", "LOCKDELAY", &DELAY.to_string()],
    );
    wait_replicated(&mut p);
    let quarantine_end = expire_time(&mut p, "lock:k");
    assert_eq!(expire_time(&mut r, "lock:k"), quarantine_end);
    let lease_end = quarantine_end - DELAY;
    let wait = lease_end + 50 - now_ms();
    std::thread::sleep(Duration::from_millis(wait.max(0) as u64));
    for (con, what) in [(&mut p, "primary"), (&mut r, "replica")] {
        assert_eq!(
            info_mode(con, "lock:k").as_deref(),
            Some("quarantined"),
            "{what}"
        );
        assert_eq!(held(con, "s"), [], "{what}");
    }
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    assert_eq!(acquire(&mut r, "lock:k", 1_000, &[]), None, "promoted");
    assert_eq!(info_mode(&mut r, "lock:k").as_deref(), Some("quarantined"));
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut r).unwrap();
    assert_eq!(acquire(&mut r, "lock:k", 1_000, &[]), None, "reloaded");
    assert_eq!(expire_time(&mut r, "lock:k"), quarantine_end);
    assert!(now_ms() < quarantine_end, "checked within the delay");
}

/// What a server must answer again after coming back: `LOCK.HELD` of both sessions,
/// every deadline, and the digest.
struct Snapshot {
    s: Vec<Holding>,
    t: Vec<Holding>,
    deadlines: Vec<i64>,
    digest: String,
}

const ALL_KEYS: [&str; 5] = ["lock:a", "rw", "sem", "lock:d", "lock:t"];

fn snapshot(con: &mut Connection) -> Snapshot {
    Snapshot {
        s: held(con, "s"),
        t: held(con, "t"),
        deadlines: deadlines(con, &ALL_KEYS),
        digest: digest(con),
    }
}

/// The server answers as it did before (leases `slack` ms shorter at most), and
/// `LOCK.KEEPALIVE` still finds and restarts every holding of `s`.
fn assert_comes_back(con: &mut Connection, before: &Snapshot, slack: i64, what: &str) {
    let now = snapshot(con);
    assert_eq!(now.digest, before.digest, "{what}: digest");
    assert_eq!(now.deadlines, before.deadlines, "{what}: deadlines");
    assert_same_holdings(&now.s, &before.s, slack, what);
    assert_same_holdings(&now.t, &before.t, slack, what);
    assert_eq!(keepalive(con, "s", 90_000), before.s.len() as i64, "{what}");
    for holding in held(con, "s") {
        assert_lease(holding.pttl, 90_000, &holding.key);
    }
    assert_eq!(keepalive(con, "t", 90_000), 1, "{what}");
}

#[test]
fn debug_reload_keeps_every_session_holding() {
    let server = Server::start();
    let mut con = server.connect();
    populate(&mut con);
    let before = snapshot(&mut con);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_comes_back(&mut con, &before, 500, "DEBUG RELOAD");
}

#[test]
fn an_rdb_restart_keeps_every_session_holding() {
    let mut server = Server::start();
    let mut con = server.connect();
    populate(&mut con);
    let before = snapshot(&mut con);
    let _: () = cmd("SAVE").query(&mut con).unwrap();
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_comes_back(&mut con, &before, 2_000, "RDB");
}

/// Holdings from before an AOF rewrite (in its base) and a keepalive and a grant after
/// it (in the appended part) come back with their sessions.
fn session_aof_round_trip(preamble: &str) {
    aof_round_trip(
        preamble,
        Rewrite::Between,
        |_, con| {
            populate(con);
        },
        |_, con, ()| {
            assert_eq!(keepalive(con, "s", 80_000), 4);
            hold(con, "lock:late", 60_000, &["SESSION", "s"]);
            (snapshot(con), expire_time(con, "lock:late"))
        },
        |con, (before, late)| {
            assert_eq!(expire_time(con, "lock:late"), late);
            assert_comes_back(con, &before, 2_000, &format!("AOF, preamble {preamble}"));
        },
    );
}

#[test]
fn an_aof_restart_with_rdb_preamble_keeps_every_session_holding() {
    session_aof_round_trip("yes");
}

#[test]
fn an_aof_restart_without_rdb_preamble_keeps_every_session_holding() {
    session_aof_round_trip("no");
}

#[test]
fn dump_and_restore_keep_a_holdings_session() {
    let source = Server::start();
    let target = Server::start();
    let mut from = source.connect();
    let mut to = target.connect();
    let (_, fence) = hold(&mut from, "lock:k", 60_000, &["SESSION", "s", "TOKEN", "t"]);
    hold(
        &mut from,
        "rw",
        60_000,
        &["SESSION", "s", "SHARED", "TOKEN", "r1"],
    );
    hold(&mut from, "rw", 60_000, &["SHARED", "TOKEN", "r2"]);
    let before = held(&mut from, "s");
    for key in ["lock:k", "rw"] {
        let payload: Vec<u8> = cmd("DUMP").arg(key).query(&mut from).unwrap();
        let left = int(&mut from, &["PTTL", key]);
        let _: () = cmd("RESTORE")
            .arg(key)
            .arg(left)
            .arg(&payload)
            .query(&mut to)
            .unwrap();
        // And back in place on the source.
        assert_eq!(int(&mut from, &["DEL", key]), 1);
        let _: () = cmd("RESTORE")
            .arg(key)
            .arg(left)
            .arg(&payload)
            .query(&mut from)
            .unwrap();
    }
    for (con, what) in [
        (&mut to, "restored elsewhere"),
        (&mut from, "restored in place"),
    ] {
        assert_same_holdings(&held(con, "s"), &before, 500, what);
        assert_eq!(fence_of(con, "lock:k", "t"), Some(fence), "{what}");
        assert_eq!(keepalive(con, "s", 90_000), 2, "{what}");
        assert_lease(int(con, &["PTTL", "lock:k"]), 90_000, what);
        for holding in held(con, "s") {
            assert_lease(holding.pttl, 90_000, &holding.key);
        }
        assert_eq!(int(con, &["LOCK.CLOSE", "s"]), 2, "{what}");
        assert!(fence_of(con, "rw", "r2").is_some(), "{what}");
    }
}

#[test]
fn a_renamed_session_lock_is_held_under_its_new_name() {
    let server = Server::start();
    let mut con = server.connect();
    let (_, fence) = hold(
        &mut con,
        "lock:old",
        60_000,
        &["SESSION", "s", "TOKEN", "t"],
    );
    let (_, sem_fence) = hold(&mut con, "sem:old", 60_000, &["SESSION", "s", "LIMIT", "2"]);
    let _: () = cmd("RENAME")
        .arg("lock:old")
        .arg("lock:new")
        .query(&mut con)
        .unwrap();
    let _: () = cmd("RENAME")
        .arg("sem:old")
        .arg("sem:new")
        .query(&mut con)
        .unwrap();
    let listed: Vec<(String, i64)> = held(&mut con, "s")
        .into_iter()
        .map(|h| (h.key, h.fence))
        .collect();
    assert_eq!(
        listed,
        [
            ("lock:new".to_string(), fence),
            ("sem:new".to_string(), sem_fence)
        ]
    );
    assert_eq!(keepalive(&mut con, "s", 90_000), 2);
    assert_lease(int(&mut con, &["PTTL", "lock:new"]), 90_000, "lock:new");
    assert_lease(int(&mut con, &["PTTL", "sem:new"]), 90_000, "sem:new");
    assert_eq!(fence_of(&mut con, "lock:new", "t"), Some(fence));
    assert_eq!(int(&mut con, &["EXISTS", "lock:old", "sem:old"]), 0);
    assert_eq!(int(&mut con, &["LOCK.CLOSE", "s"]), 2);
    assert_eq!(int(&mut con, &["EXISTS", "lock:new", "sem:new"]), 0);
}

// ---------------------------------------------------------------------------------
// Cluster

/// A session holding a lock on every master: each node keeps (and counts) its own; a
/// live `MIGRATE` of one takes the holding with its session and lease to the new owner,
/// whose next keepalive finds it, while the old owner no longer counts it.
#[test]
fn each_node_keeps_its_own_holdings_and_a_migrated_one_follows_its_slot() {
    let cluster = Cluster::start();
    let keys = key_per_node(&cluster, "lock:session");
    let mut cons: Vec<Connection> = cluster.nodes.iter().map(Server::connect).collect();
    let mut fences = Vec::new();
    for (con, key) in cons.iter_mut().zip(&keys) {
        fences.push(hold(con, key, 60_000, &["SESSION", "worker", "TOKEN", key]).1);
    }
    for (n, con) in cons.iter_mut().enumerate() {
        assert_eq!(keepalive(con, "worker", 60_000), 1, "node {n}");
        let listed = held(con, "worker");
        assert_eq!(listed.len(), 1, "node {n}");
        assert_eq!((&listed[0].key, listed[0].fence), (&keys[n], fences[n]));
    }

    // Move node 0's key to node 1, as resharding does.
    let key = &keys[0];
    let (source, target) = (&cluster.nodes[0], &cluster.nodes[1]);
    let slot: i64 = slot_of(&mut cons[0], key);
    let moving = SlotMove::begin(source, target, slot);
    moving.migrate(&mut cons[0], key);
    moving.finish([1, 0, 2].map(|node| &cluster.nodes[node]));

    let moved = held(&mut cons[1], "worker");
    let moved_keys: Vec<(&str, i64)> = moved.iter().map(|h| (h.key.as_str(), h.fence)).collect();
    let mut expected = vec![(keys[0].as_str(), fences[0]), (keys[1].as_str(), fences[1])];
    expected.sort_by_key(|(_, fence)| *fence);
    assert_eq!(
        moved_keys, expected,
        "the target lists both, in fence order"
    );
    let migrated = moved.iter().find(|h| h.key == keys[0]).unwrap();
    assert!(
        migrated.pttl > 50_000 && migrated.pttl <= 60_000,
        "its lease came along: {}",
        migrated.pttl
    );
    assert_eq!(keepalive(&mut cons[1], "worker", 90_000), 2);
    assert_lease(int(&mut cons[1], &["PTTL", key]), 90_000, "migrated key");
    assert_eq!(fence_of(&mut cons[1], key, key), Some(fences[0]));
    assert_eq!(
        keepalive(&mut cons[0], "worker", 90_000),
        0,
        "the source holds nothing now"
    );
    assert_eq!(held(&mut cons[0], "worker"), []);
    assert_eq!(keepalive(&mut cons[2], "worker", 90_000), 1);
    assert_eq!(int(&mut cons[1], &["LOCK.CLOSE", "worker"]), 2);
    assert_eq!(int(&mut cons[1], &["DBSIZE"]), 0);
}

/// A lock-delay holding whose key's expiry was changed by hand (`PERSIST`, a longer
/// `PEXPIRE`) and then proclaimed: the proclaim writes the key's expiry from the
/// holding (lease end plus delay), on the primary as on its replica and in the AOF.
fn proclaim_after_a_hand_set_expiry(hand_set: &[&str]) {
    let mut primary = Server::with_args(&aof_always("no"));
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut p = primary.connect();
    let mut r = replica.connect();
    hold(
        &mut p,
        "leader",
        60_000,
        &["TOKEN", "t", "LOCKDELAY", "5000"],
    );
    let _: Value = cmd(hand_set[0]).arg(&hand_set[1..]).query(&mut p).unwrap();
    assert_eq!(
        int(&mut p, &["LOCK.PROCLAIM", "leader", "t", "10.0.0.1:80"]),
        1
    );
    wait_replicated(&mut p);
    let deadline = expire_time(&mut p, "leader");
    assert!(
        deadline > 0,
        "{hand_set:?}: the key expires with lease and delay"
    );
    assert_eq!(expire_time(&mut r, "leader"), deadline, "{hand_set:?}");
    assert_eq!(digest(&mut p), digest(&mut r), "{hand_set:?}");
    primary.kill();
    primary.restart();
    let mut p = primary.connect();
    assert_eq!(expire_time(&mut p, "leader"), deadline, "{hand_set:?}: AOF");
}

#[test]
fn a_proclaim_after_persist_gives_primary_replica_and_aof_one_deadline() {
    proclaim_after_a_hand_set_expiry(&["PERSIST", "leader"]);
}

#[test]
fn a_proclaim_after_a_longer_pexpire_gives_primary_replica_and_aof_one_deadline() {
    proclaim_after_a_hand_set_expiry(&["PEXPIRE", "leader", "600000"]);
}
