//! Atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`) of a slot holding locks:
//! every kind of holding arrives whole on the target (tokens, fences, leases, sessions,
//! values, marks), the target's session index and fence clock follow, the source's
//! waiters hear `TRYAGAIN` when the slot leaves, a cancelled migration leaves the
//! source as it was, and replicas end equal. Servers without atomic slot migration
//! (Redis 7.0, 8.2) skip these tests with a line saying so; the legacy
//! `SETSLOT`/`MIGRATE` path is tested in `cluster`.

use std::thread;
use std::time::Duration;

use redis::RedisResult;
use testkit::*;

use super::cluster::{node_id, Cluster};

/// The hash tag of every key here: all of them live in one slot.
const TAG: &str = "{asm}";

fn key(name: &str) -> String {
    format!("{TAG}{name}")
}

/// A started cluster, the slot of the keys here, the node that owns it and the node
/// it is to move to.
struct Setting {
    cluster: Cluster,
    slot: i64,
    source: usize,
    target: usize,
}

/// The cluster for `test`, or `None` (and a line saying why) on a server without
/// atomic slot migration.
fn setting(test: &str) -> Option<Setting> {
    let cluster = Cluster::start();
    if !has_atomic_migration(&cluster.nodes[0], test) {
        return None;
    }
    let slot = slot_of(&mut cluster.nodes[0].connect(), &key("x"));
    let source = cluster.owner_of(&key("x"));
    let target = (source + 1) % cluster.nodes.len();
    Some(Setting {
        cluster,
        slot,
        source,
        target,
    })
}

/// Moves `slot` from `source` to `target` and waits until every node knows its owner.
fn migrate(cluster: &Cluster, source: usize, target: usize, slot: i64) {
    let (from, to) = (&cluster.nodes[source], &cluster.nodes[target]);
    let export = start_migration(from, &node_id(to), slot);
    assert_eq!(
        migration_end(from, &export),
        "success",
        "the migration completed"
    );
    eventually(
        Duration::from_secs(20),
        "every node knows the new owner",
        || {
            cluster.owner_of(&key("x")) == target
                && cluster.nodes.iter().all(|node| {
                    let owner = owner_seen_by(node, slot);
                    owner.as_deref() == Some(node_id(to).as_str())
                })
        },
    );
}

fn acquire(con: &mut Connection, name: &str, extra: &[&str]) -> (String, i64) {
    let granted: Option<(String, i64)> = cmd("LOCK.ACQUIRE")
        .arg(name)
        .arg(60_000)
        .arg(extra)
        .query(con)
        .expect("LOCK.ACQUIRE");
    granted.expect("a free lock is granted")
}

fn fencelock_info(con: &mut Connection, field: &str) -> i64 {
    info_field(con, "fencelock", &format!("fencelock_{field}"))
        .and_then(|value| value.parse().ok())
        .unwrap_or(-1)
}

#[test]
fn a_migrated_slot_brings_every_holding_and_answers_its_waiters() {
    let Some(Setting {
        cluster,
        slot,
        source,
        target,
    }) = setting("a_migrated_slot_brings_every_holding")
    else {
        return;
    };
    let mut from = cluster.nodes[source].connect();

    let (mutex, mutex_fence) = acquire(&mut from, &key("mutex"), &[]);
    let first = acquire(&mut from, &key("sem"), &["LIMIT", "2"]);
    let second = acquire(&mut from, &key("sem"), &["LIMIT", "2"]);
    let (in_session, session_fence) = acquire(&mut from, &key("sess"), &["SESSION", "s-asm"]);
    let (valued, _) = acquire(&mut from, &key("val"), &[]);
    let _: () = cmd("LOCK.PROCLAIM")
        .arg(key("val"))
        .arg(&valued)
        .arg("v1")
        .query(&mut from)
        .expect("LOCK.PROCLAIM");
    // The mark admits the session's fence: an older one is stale from now on.
    let _: () = cmd("LOCK.FENCED")
        .arg(key("mark"))
        .arg(session_fence)
        .arg("SET")
        .arg(key("data"))
        .arg("v")
        .query(&mut from)
        .expect("LOCK.FENCED");
    let highest = [mutex_fence, first.1, second.1, session_fence]
        .into_iter()
        .max()
        .unwrap_or_default();

    // A waiter queued on the source, with a BLOCK far longer than the test.
    let mut waiter = testkit::resp::RawClient::connect(cluster.nodes[source].port);
    let mutex_key = key("mutex");
    waiter.send(&[
        b"LOCK.ACQUIRE",
        mutex_key.as_bytes(),
        b"5000",
        b"BLOCK",
        b"600000",
    ]);
    eventually(Duration::from_secs(5), "the waiter is queued", || {
        fencelock_info(&mut from, "waiters") == 1
    });

    migrate(&cluster, source, target, slot);

    let answer = waiter.read_reply();
    assert!(
        matches!(&answer, testkit::resp::Reply::Error(text) if text.starts_with("TRYAGAIN")),
        "the waiter hears TRYAGAIN when the slot moves: {answer:?}"
    );
    let mut to = cluster.nodes[target].connect();
    assert_eq!(fence_of(&mut to, &key("mutex"), &mutex), Some(mutex_fence));
    assert_eq!(fence_of(&mut to, &key("sem"), &first.0), Some(first.1));
    assert_eq!(fence_of(&mut to, &key("sem"), &second.0), Some(second.1));
    assert_eq!(
        fence_of(&mut to, &key("sess"), &in_session),
        Some(session_fence)
    );
    for name in ["mutex", "sem", "sess", "val"] {
        let pttl = int(&mut to, &["PTTL", &key(name)]);
        assert!(
            (1..=60_000).contains(&pttl),
            "{name} keeps its lease: {pttl}"
        );
    }
    let info: Vec<Value> = cmd("LOCK.INFO")
        .arg(key("val"))
        .query(&mut to)
        .expect("LOCK.INFO");
    assert!(
        info.contains(&Value::BulkString(b"v1".to_vec())),
        "the value came along: {info:?}"
    );
    // The session's holding is kept alive there, and no longer counted here.
    assert_eq!(int(&mut to, &["LOCK.KEEPALIVE", "s-asm", "60000"]), 1);
    assert_eq!(int(&mut from, &["LOCK.KEEPALIVE", "s-asm", "60000"]), 0);
    assert_eq!(fencelock_info(&mut from, "sessions"), 0);
    assert_eq!(fencelock_info(&mut from, "held_locks"), 0);
    assert_eq!(int(&mut from, &["DBSIZE"]), 0, "the source kept nothing");
    // The mark came with its high-water mark.
    let stale: RedisResult<Value> = cmd("LOCK.FENCED")
        .arg(key("mark"))
        .arg(session_fence - 1)
        .arg("SET")
        .arg(key("data"))
        .arg("old")
        .query(&mut to);
    assert_eq!(stale.expect_err("stale").code(), Some("STALE"));
    // The target's clock covers every fence it received: its next grant is higher.
    assert!(fencelock_info(&mut to, "fence_clock") >= highest);
    let (_, next) = acquire(&mut to, &key("next"), &[]);
    assert!(next > highest, "{next} > {highest}");
}

#[test]
fn a_cancelled_migration_leaves_everything_on_the_source() {
    let Some(Setting {
        cluster,
        slot,
        source,
        target,
    }) = setting("a_cancelled_migration")
    else {
        return;
    };
    let mut from = cluster.nodes[source].connect();
    let (mutex, mutex_fence) = acquire(&mut from, &key("mutex"), &[]);
    let (in_session, session_fence) = acquire(&mut from, &key("sess"), &["SESSION", "s-cancel"]);

    // The target cannot answer: the migration waits, and is cancelled meanwhile.
    let target_id = node_id(&cluster.nodes[target]);
    cluster.nodes[target].pause();
    let export = start_migration(&cluster.nodes[source], &target_id, slot);
    let _: () = cmd("CLUSTER")
        .arg("CANCELSLOTMIGRATIONS")
        .query(&mut from)
        .expect("CLUSTER CANCELSLOTMIGRATIONS");
    let state = migration_end(&cluster.nodes[source], &export);
    cluster.nodes[target].resume();
    assert_ne!(state, "success");

    assert_eq!(cluster.owner_of(&key("x")), source, "the slot stayed");
    assert_eq!(
        fence_of(&mut from, &key("mutex"), &mutex),
        Some(mutex_fence)
    );
    assert_eq!(
        fence_of(&mut from, &key("sess"), &in_session),
        Some(session_fence)
    );
    assert_eq!(int(&mut from, &["LOCK.KEEPALIVE", "s-cancel", "60000"]), 1);
    let mut to = cluster.nodes[target].connect();
    eventually(Duration::from_secs(10), "nothing half-imported", || {
        int(&mut to, &["DBSIZE"]) == 0
    });
    assert_eq!(int(&mut to, &["LOCK.KEEPALIVE", "s-cancel", "60000"]), 0);
    assert_eq!(fencelock_info(&mut to, "held_locks"), 0);
    // A later migration of the same slot still completes.
    migrate(&cluster, source, target, slot);
    assert_eq!(fence_of(&mut to, &key("mutex"), &mutex), Some(mutex_fence));
}

#[test]
fn a_client_taking_the_lock_through_moves_sees_only_rising_fences() {
    let Some(Setting {
        cluster,
        slot,
        source: home,
        target: away,
    }) = setting("a_client_taking_the_lock_through_moves")
    else {
        return;
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut client = cluster.client();
    let worker = {
        let stop = stop.clone();
        thread::spawn(move || {
            let name = key("busy");
            let mut fences = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let granted: RedisResult<Option<(String, i64)>> = cmd("LOCK.ACQUIRE")
                    .arg(&name)
                    .arg(10_000)
                    .arg("BLOCK")
                    .arg(5_000)
                    .query(&mut client);
                // A redirect the client did not follow in time: it asks again.
                let Ok(Some((token, fence))) = granted else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                fences.push(fence);
                let released: RedisResult<i64> = cmd("LOCK.RELEASE")
                    .arg(&name)
                    .arg(&token)
                    .query(&mut client);
                assert!(
                    !matches!(released, Ok(0)),
                    "a lock taken was not held at its release (fence {fence})"
                );
            }
            fences
        })
    };
    for (from, to) in [(home, away), (away, home), (home, away)] {
        thread::sleep(Duration::from_millis(200));
        migrate(&cluster, from, to, slot);
    }
    thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let fences = worker.join().expect("the client thread");
    assert!(
        fences.len() > 3,
        "the client kept taking the lock: {fences:?}"
    );
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "fences only rise through the moves: {fences:?}"
    );
}

/// Replicas of both shards follow the migration: the source's replica drops the keys,
/// the target's gets them, and each equals its primary (`DEBUG DIGEST`).
#[test]
fn replicas_of_both_shards_end_equal() {
    let Some(Setting {
        cluster,
        slot,
        source,
        target,
    }) = setting("replicas_of_both_shards_end_equal")
    else {
        return;
    };
    let replicas: Vec<Server> = [source, target]
        .iter()
        .map(|&primary| cluster_replica(&cluster, primary))
        .collect();
    let mut from = cluster.nodes[source].connect();
    acquire(&mut from, &key("mutex"), &[]);
    acquire(&mut from, &key("sem"), &["LIMIT", "3"]);
    acquire(&mut from, &key("sem"), &["LIMIT", "3"]);
    acquire(&mut from, &key("sess"), &["SESSION", "s-replica"]);
    migrate(&cluster, source, target, slot);
    let digest = |con: &mut Connection| -> String {
        cmd("DEBUG").arg("DIGEST").query(con).expect("DEBUG DIGEST")
    };
    for (replica, primary) in replicas.iter().zip([source, target]) {
        let mut on_primary = cluster.nodes[primary].connect();
        let mut on_replica = replica.connect();
        eventually(
            Duration::from_secs(20),
            "the replica equals its primary",
            || {
                let _: RedisResult<i64> = cmd("WAIT").arg(1).arg(1000).query(&mut on_primary);
                digest(&mut on_primary) == digest(&mut on_replica)
            },
        );
    }
    let mut target_replica = replicas[1].connect();
    assert_eq!(int(&mut target_replica, &["DBSIZE"]), 3);
    let mut source_replica = replicas[0].connect();
    assert_eq!(int(&mut source_replica, &["DBSIZE"]), 0);
}

/// A new node joined to the cluster as a replica of `primary`, its link up.
fn cluster_replica(cluster: &Cluster, primary: usize) -> Server {
    let replica = Server::cluster_node();
    let mut con = replica.connect();
    let _: () = cmd("CLUSTER")
        .arg("MEET")
        .arg("127.0.0.1")
        .arg(cluster.nodes[primary].port)
        .query(&mut con)
        .expect("CLUSTER MEET");
    let primary_id = node_id(&cluster.nodes[primary]);
    eventually(Duration::from_secs(20), "the replica follows", || {
        let replicate: RedisResult<()> = cmd("CLUSTER")
            .arg("REPLICATE")
            .arg(&primary_id)
            .query(&mut con);
        replicate.is_ok()
    });
    eventually(Duration::from_secs(30), "the replica's link is up", || {
        info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
    });
    replica
}

/// Run-once records move whole (as their `LOCK.RECORD` AOF form): a running claim with
/// its holder, fingerprint and session, a done record with its result.
#[test]
fn a_migrated_slot_brings_run_once_records_whole() {
    let Some(Setting {
        cluster,
        slot,
        source,
        target,
    }) = setting("a_migrated_slot_brings_run_once_records_whole")
    else {
        return;
    };
    let mut from = cluster.nodes[source].connect();
    let claim = |con: &mut Connection, name: &str, extra: &[&str]| -> Value {
        cmd("LOCK.ONCE")
            .arg(key(name))
            .arg(60_000)
            .arg("KEEP")
            .arg(60_000)
            .arg(extra)
            .query(con)
            .expect("LOCK.ONCE")
    };
    let extra = ["TOKEN", "t1", "FINGERPRINT", "fp", "SESSION", "s-once"];
    let Value::Array(running) = claim(&mut from, "running", &extra) else {
        panic!("runs");
    };
    let Value::Array(done) = claim(&mut from, "done", &["TOKEN", "t2"]) else {
        panic!("runs");
    };
    assert_eq!(int(&mut from, &["LOCK.DONE", &key("done"), "t2", "r"]), 1);
    migrate(&cluster, source, target, slot);
    let mut to = cluster.nodes[target].connect();
    assert_eq!(
        fence_of(&mut to, &key("running"), "t1"),
        Some(redis::from_redis_value(running[1].clone()).unwrap())
    );
    assert_eq!(claim(&mut to, "running", &[]), Value::Nil, "still running");
    let refused = cmd("LOCK.ONCE")
        .arg(key("running"))
        .arg(1_000)
        .arg("KEEP")
        .arg(1_000)
        .arg("FINGERPRINT")
        .arg("other")
        .query::<Value>(&mut to)
        .unwrap_err();
    assert_eq!(refused.code(), Some("FINGERPRINT"));
    assert_eq!(
        keepalive(&mut to, "s-once", 60_000),
        1,
        "the session holds it there"
    );
    assert_eq!(
        claim(&mut to, "done", &[]),
        Value::Array(vec![
            Value::Nil,
            done[1].clone(),
            Value::BulkString(b"r".to_vec())
        ])
    );
}
