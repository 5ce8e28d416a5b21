//! Shared holders (semaphores and read-write locks) beyond one server's memory: every
//! holder's token, fence and own deadline across `DEBUG RELOAD`, an RDB restart and AOF
//! restarts (with and without the RDB preamble, with and without `BGREWRITEAOF`); a
//! replica equal to its primary (`DEBUG DIGEST`) after shared grants, refreshes,
//! releases, handoffs and one holder's expiry; a replica that stops counting an ended
//! holder while its primary is silent; a promoted replica that ends a holder's lease by
//! itself while the others keep theirs; and semaphores on hash-tagged keys on every
//! master of a cluster, through a cluster client.

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use redis::cluster::ClusterConnection;
use testkit::resp::RawClient;
use testkit::*;

use crate::cluster::Cluster;

/// One holder as granted: its key, token and fence, its own deadline (Unix ms), and
/// what the key is (`LOCK.INFO` mode and limit).
#[derive(Clone, Debug)]
struct Holder {
    key: String,
    token: String,
    fence: i64,
    deadline: i64,
    mode: &'static str,
    limit: Option<i64>,
}

/// Takes `key` for `token` (`mode`: nothing, `SHARED` or `LIMIT n`). Each holder of a
/// key is taken with a later deadline than those before it, so that the key's expiry
/// right after the grant is this holder's own deadline.
fn take(con: &mut Connection, key: &str, token: &str, ttl: i64, mode: &[&str]) -> Holder {
    let mut extra = vec!["TOKEN", token];
    extra.extend_from_slice(mode);
    let (granted, fence) =
        acquire(con, key, ttl, &extra).unwrap_or_else(|| panic!("{key} {token} granted"));
    assert_eq!(granted, token);
    let (mode, limit) = match mode {
        [] => ("exclusive", None),
        ["SHARED"] => ("shared", None),
        ["LIMIT", n] => ("semaphore", Some(n.parse().unwrap())),
        other => panic!("mode {other:?}"),
    };
    Holder {
        key: key.into(),
        token: token.into(),
        fence,
        deadline: expire_time(con, key),
        mode,
        limit,
    }
}

/// What the persistence tests write, and check afterwards.
struct Locks {
    held: Vec<Holder>,
    /// Holders that released: they must not come back.
    gone: Vec<Holder>,
    /// A holder whose short lease ends on its own during or after the restart.
    short: Option<Holder>,
}

/// - `sem`: a semaphore of 3, full, its latest holder refreshed;
/// - `rw`: two readers, the latest one extended with `ADD` (and, with `short`, a
///   third reader whose lease is 400 ms);
/// - `ex`: an exclusive lock;
/// - `half`: a semaphore of 2 whose latest holder released.
fn populate(con: &mut Connection, short: bool) -> Locks {
    let mut held = Vec::new();
    held.push(take(con, "sem", "s1", 20_000, &["LIMIT", "3"]));
    held.push(take(con, "sem", "s2", 40_000, &["LIMIT", "3"]));
    let s3 = take(con, "sem", "s3", 60_000, &["LIMIT", "3"]);
    assert_eq!(int(con, &["LOCK.REFRESH", "sem", "s3", "70000"]), 1);
    held.push(Holder {
        deadline: expire_time(con, "sem"),
        ..s3
    });
    let short = short.then(|| take(con, "rw", "r0", 400, &["SHARED"]));
    held.push(take(con, "rw", "r1", 30_000, &["SHARED"]));
    let r2 = take(con, "rw", "r2", 50_000, &["SHARED"]);
    assert_eq!(int(con, &["LOCK.REFRESH", "rw", "r2", "5000", "ADD"]), 1);
    let deadline = expire_time(con, "rw");
    assert_eq!(deadline, r2.deadline + 5_000, "ADD extends the lease's end");
    held.push(Holder { deadline, ..r2 });
    held.push(take(con, "ex", "x", 60_000, &[]));
    held.push(take(con, "half", "h1", 30_000, &["LIMIT", "2"]));
    let h2 = take(con, "half", "h2", 60_000, &["LIMIT", "2"]);
    assert_eq!(int(con, &["LOCK.RELEASE", "half", "h2"]), 1);
    Locks {
        held,
        gone: vec![h2],
        short,
    }
}

/// Every holder is there with its token, fence and own deadline; released and ended
/// ones are not; fences go on rising above all of them.
fn verify(con: &mut Connection, locks: &Locks) {
    if let Some(short) = &locks.short {
        eventually(Duration::from_secs(5), "the short lease ends", || {
            fence_of(con, &short.key, &short.token).is_none()
        });
        let refreshed = int(con, &["LOCK.REFRESH", &short.key, &short.token, "60000"]);
        assert_eq!(refreshed, 0, "an ended holder is not revived");
    }
    for gone in &locks.gone {
        assert_eq!(fence_of(con, &gone.key, &gone.token), None, "{gone:?}");
    }
    let mut keys: Vec<&str> = Vec::new();
    for holder in &locks.held {
        if !keys.contains(&holder.key.as_str()) {
            keys.push(&holder.key);
        }
    }
    for key in keys {
        let mut mine: Vec<&Holder> = locks.held.iter().filter(|h| h.key == key).collect();
        mine.sort_by_key(|h| h.deadline);
        let info = lock_info(con, key).unwrap_or_else(|| panic!("{key} is held"));
        let get = |name: &str| -> Option<Value> { info.get(name).cloned() };
        let as_int = |value: Option<Value>| -> i64 {
            redis::from_redis_value(value.expect("field present")).unwrap()
        };
        let highest = mine.iter().map(|h| h.fence).max().unwrap();
        assert_eq!(as_int(get("held")), 1, "{key}");
        assert_eq!(as_int(get("fence")), highest, "{key}");
        assert_eq!(
            as_int(get("holders")),
            i64::try_from(mine.len()).unwrap(),
            "{key}: {info:?}"
        );
        let mode: String = redis::from_redis_value(get("mode").expect("mode")).unwrap();
        assert_eq!(mode, mine[0].mode, "{key}");
        assert_eq!(
            get("limit").map(|v| as_int(Some(v))),
            mine[0].limit,
            "{key}"
        );
        for holder in &mine {
            assert_eq!(
                fence_of(con, key, &holder.token),
                Some(holder.fence),
                "{holder:?}"
            );
        }
        // Each holder's own deadline: the key's expiry is always the latest remaining.
        for (i, holder) in mine.iter().enumerate().rev() {
            assert_eq!(expire_time(con, key), holder.deadline, "{key}: {holder:?}");
            if i == 0 {
                let refreshed = int(con, &["LOCK.REFRESH", key, &holder.token, "60000"]);
                assert_eq!(refreshed, 1, "{holder:?}");
            }
            let released = int(con, &["LOCK.RELEASE", key, &holder.token]);
            assert_eq!(released, 1, "{holder:?}");
        }
        assert_eq!(int(con, &["EXISTS", key]), 0, "{key}");
    }
    let highest = locks
        .held
        .iter()
        .chain(&locks.gone)
        .chain(&locks.short)
        .map(|h| h.fence)
        .max()
        .unwrap();
    let (_, next) = acquire(con, "sem", 1_000, &["LIMIT", "3"]).unwrap();
    assert!(next > highest, "{next} > {highest}");
}

#[test]
fn debug_reload_keeps_every_holder() {
    let server = Server::start();
    let mut con = server.connect();
    let locks = populate(&mut con, false);
    let before = digest(&mut con);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(digest(&mut con), before);
    verify(&mut con, &locks);

    // A holder's own short deadline survives a reload: it ends, the other stays.
    let q1 = take(&mut con, "q", "q1", 300, &["LIMIT", "2"]);
    let q2 = take(&mut con, "q", "q2", 60_000, &["LIMIT", "2"]);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    eventually(Duration::from_secs(5), "q1's lease ends", || {
        fence_of(&mut con, "q", &q1.token).is_none()
    });
    assert_eq!(fence_of(&mut con, "q", &q2.token), Some(q2.fence));
    assert_eq!(expire_time(&mut con, "q"), q2.deadline);
    let info = lock_info(&mut con, "q").unwrap();
    assert_eq!(info["holders"], Value::Int(1));
}

#[test]
fn rdb_restart_keeps_every_holder() {
    let mut server = Server::with_args(&["save", "3600 1"]);
    let mut con = server.connect();
    let locks = populate(&mut con, true);
    server.shutdown();
    server.restart();
    let mut con = server.connect();
    verify(&mut con, &locks);
}

/// Populates, optionally rewrites the AOF, changes more after that (so the rewrite's
/// base and the increment after it are both read back), is killed and restarts.
fn shared_aof_round_trip(preamble: &str, rewrite: Rewrite) {
    aof_round_trip(
        preamble,
        rewrite,
        |_, con| populate(con, true),
        |_, con, mut locks| {
            // After the rewrite: a holder leaves a full semaphore, a newcomer takes the
            // permit, another key is taken.
            assert_eq!(int(con, &["LOCK.RELEASE", "sem", "s2"]), 1);
            let s2 = locks.held.iter().position(|h| h.token == "s2").unwrap();
            locks.gone.push(locks.held.remove(s2));
            locks
                .held
                .push(take(con, "sem", "s4", 80_000, &["LIMIT", "3"]));
            locks
                .held
                .push(take(con, "late", "l1", 60_000, &["SHARED"]));
            locks
        },
        |con, locks| verify(con, &locks),
    );
}

#[test]
fn aof_restart_with_rdb_preamble_keeps_every_holder() {
    shared_aof_round_trip("yes", Rewrite::Never);
}

#[test]
fn aof_restart_without_rdb_preamble_keeps_every_holder() {
    shared_aof_round_trip("no", Rewrite::Never);
}

#[test]
fn aof_restart_after_a_rewrite_with_rdb_preamble_keeps_every_holder() {
    shared_aof_round_trip("yes", Rewrite::Between);
}

#[test]
fn aof_restart_after_a_rewrite_without_rdb_preamble_keeps_every_holder() {
    shared_aof_round_trip("no", Rewrite::Between);
}

/// `LOCK.INFO` without the remaining lease, which moves between two reads.
fn info_without_ttl(con: &mut Connection, key: &str) -> Option<HashMap<String, Value>> {
    lock_info(con, key).map(|mut info| {
        info.remove("ttl-ms");
        info
    })
}

#[test]
fn a_replica_equals_its_primary_after_shared_grants_refreshes_releases_and_expiry() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    for token in ["a", "b", "c"] {
        acquire(&mut p, "sem", 60_000, &["TOKEN", token, "LIMIT", "3"]).unwrap();
    }
    assert_eq!(int(&mut p, &["LOCK.REFRESH", "sem", "a", "90000"]), 1);
    assert_eq!(int(&mut p, &["LOCK.REFRESH", "sem", "b", "5000", "ADD"]), 1);
    assert_eq!(
        acquire(&mut p, "sem", 60_000, &["TOKEN", "a", "LIMIT", "3"])
            .unwrap()
            .0,
        "a",
        "a same-token retry"
    );
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "sem", "c"]), 1);

    // Readers, one of them short-lived; a writer waits and is handed the lock when the
    // last reader's lease ends.
    acquire(&mut p, "rw", 60_000, &["TOKEN", "r1", "SHARED"]).unwrap();
    acquire(&mut p, "rw", 200, &["TOKEN", "r2", "SHARED"]).unwrap();
    let mut writer = RawClient::connect(primary.port);
    writer.send_pipeline(&[&["LOCK.ACQUIRE", "rw", "60000", "TOKEN", "w", "BLOCK", "0"]]);
    wait_for_waiters(&mut p, "rw", 1);
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "rw", "r1"]), 1);
    let granted = writer.read_reply();
    assert!(granted.grant().is_some(), "{granted:?}");

    // Two readers queued behind an exclusive holder are handed the lock together.
    acquire(&mut p, "group", 60_000, &["TOKEN", "x"]).unwrap();
    let mut readers: Vec<RawClient> = (1..=2)
        .map(|i| {
            let mut reader = RawClient::connect(primary.port);
            let token = format!("g{i}");
            reader.send_pipeline(&[&[
                "LOCK.ACQUIRE",
                "group",
                "60000",
                "TOKEN",
                &token,
                "BLOCK",
                "0",
                "SHARED",
            ]]);
            wait_for_waiters(&mut p, "group", i);
            reader
        })
        .collect();
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "group", "x"]), 1);
    for reader in &mut readers {
        let granted = reader.read_reply();
        assert!(granted.grant().is_some(), "{granted:?}");
    }

    // A holder among others whose lease ends on the primary.
    acquire(&mut p, "sem", 100, &["TOKEN", "d", "LIMIT", "3"]).unwrap();
    eventually(Duration::from_secs(3), "d's lease ends", || {
        fence_of(&mut p, "sem", "d").is_none()
    });

    wait_replicated(&mut p);
    eventually(
        Duration::from_secs(3),
        "the replica has the same data",
        || digest(&mut p) == digest(&mut r),
    );
    for key in ["sem", "rw", "group"] {
        assert_eq!(
            info_without_ttl(&mut p, key),
            info_without_ttl(&mut r, key),
            "{key}"
        );
        assert_eq!(expire_time(&mut p, key), expire_time(&mut r, key), "{key}");
    }
    for (key, token) in [
        ("sem", "a"),
        ("sem", "b"),
        ("sem", "c"),
        ("sem", "d"),
        ("rw", "r1"),
        ("rw", "r2"),
        ("rw", "w"),
        ("group", "x"),
        ("group", "g1"),
        ("group", "g2"),
    ] {
        assert_eq!(
            fence_of(&mut p, key, token),
            fence_of(&mut r, key, token),
            "{key} {token}"
        );
    }
    assert_eq!(fence_of(&mut r, "sem", "c"), None);
    assert_eq!(fence_of(&mut r, "sem", "d"), None);
    assert!(fence_of(&mut r, "rw", "w").is_some());
    assert_eq!(lock_info(&mut r, "sem").unwrap()["holders"], Value::Int(2));
}

#[test]
fn after_promotion_an_ended_holder_no_longer_counts_and_the_others_still_do() {
    let (mut primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let (_, a) = acquire(&mut p, "sem", 300, &["TOKEN", "a", "LIMIT", "2"]).unwrap();
    let (_, b) = acquire(&mut p, "sem", 60_000, &["TOKEN", "b", "LIMIT", "2"]).unwrap();
    wait_replicated(&mut p);
    // Failover: the primary is gone before a's lease ends; the replica takes over.
    primary.kill();
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    // A waiter on the new primary is served when a's lease ends there.
    let mut waiter = RawClient::connect(replica.port);
    let reply = waiter.call_str(&[
        "LOCK.ACQUIRE",
        "sem",
        "60000",
        "TOKEN",
        "w",
        "LIMIT",
        "2",
        "BLOCK",
        "5000",
    ]);
    let Some((token, w)) = reply.grant() else {
        panic!("a's permit was not freed: {reply:?}")
    };
    assert_eq!(token, b"w");
    assert!(w > b && b > a);
    assert_eq!(fence_of(&mut r, "sem", "a"), None);
    assert_eq!(int(&mut r, &["LOCK.REFRESH", "sem", "a", "60000"]), 0);
    assert_eq!(fence_of(&mut r, "sem", "b"), Some(b));
    assert_eq!(int(&mut r, &["LOCK.REFRESH", "sem", "b", "60000"]), 1);
    assert_eq!(lock_info(&mut r, "sem").unwrap()["holders"], Value::Int(2));
    assert_eq!(
        acquire(&mut r, "sem", 60_000, &["TOKEN", "e", "LIMIT", "2"]),
        None,
        "b and w hold both permits"
    );
    assert_eq!(int(&mut r, &["LOCK.RELEASE", "sem", "b"]), 1);
    assert!(acquire(&mut r, "sem", 60_000, &["TOKEN", "e", "LIMIT", "2"]).is_some());
}

// ---------------------------------------------------------------------------------
// Cluster (the launcher of cluster.rs)

fn on_cluster<T: redis::FromRedisValue>(con: &mut ClusterConnection, args: &[&str]) -> T {
    let (name, rest) = args.split_first().expect("a command");
    cmd(name)
        .arg(rest)
        .query(con)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn semaphores_on_hash_tagged_keys_work_on_every_master_through_a_cluster_client() {
    let cluster = Cluster::start();
    // One hash tag served by each master.
    let mut tags: HashMap<usize, String> = HashMap::new();
    for i in 0.. {
        let tag = format!("pay{i}");
        tags.entry(cluster.owner_of(&format!("sem:{{{tag}}}")))
            .or_insert(tag);
        if tags.len() == cluster.nodes.len() {
            break;
        }
    }
    let mut con = cluster.client();
    for (node, tag) in &tags {
        let sem = format!("sem:{{{tag}}}");
        let data = format!("{{{tag}}}:calls");
        let grant = |con: &mut ClusterConnection, token: &str| -> Option<(String, i64)> {
            on_cluster(
                con,
                &["LOCK.ACQUIRE", &sem, "30000", "TOKEN", token, "LIMIT", "2"],
            )
        };
        let (_, a) = grant(&mut con, "a").expect("first permit");
        let (_, b) = grant(&mut con, "b").expect("second permit");
        assert!(b > a);
        assert_eq!(grant(&mut con, "c"), None, "node {node}: full");
        let calls: i64 = on_cluster(&mut con, &["LOCK.GUARD", &sem, "a", "INCR", &data]);
        assert_eq!(calls, 1, "a guarded write routed with the tag");
        let info: Vec<Value> = on_cluster(&mut con, &["LOCK.INFO", &sem]);
        let info: HashMap<String, Value> = info
            .chunks(2)
            .map(|pair| {
                (
                    redis::from_redis_value(pair[0].clone()).unwrap(),
                    pair[1].clone(),
                )
            })
            .collect();
        assert_eq!(info["holders"], Value::Int(2), "{info:?}");
        assert_eq!(info["limit"], Value::Int(2), "{info:?}");

        // A third client waits through its own cluster connection and is handed a's
        // permit when a releases.
        let mut waiter_con = cluster.client();
        let waiter_sem = sem.clone();
        let waiter = thread::spawn(move || -> Option<(String, i64)> {
            on_cluster(
                &mut waiter_con,
                &[
                    "LOCK.ACQUIRE",
                    &waiter_sem,
                    "30000",
                    "TOKEN",
                    "w",
                    "LIMIT",
                    "2",
                    "BLOCK",
                    "10000",
                ],
            )
        });
        let mut direct = cluster.nodes[*node].connect();
        wait_for_waiters(&mut direct, &sem, 1);
        assert_eq!(on_cluster::<i64>(&mut con, &["LOCK.RELEASE", &sem, "a"]), 1);
        let (token, w) = waiter
            .join()
            .expect("waiter thread")
            .expect("handed a's permit");
        assert_eq!(token, "w");
        assert!(w > b);
        assert_eq!(
            fence_of(&mut direct, &sem, "w"),
            Some(w),
            "served on node {node}"
        );
        let dbsize: i64 = cmd("DBSIZE").query(&mut direct).unwrap();
        assert!(dbsize >= 1);
        for token in ["b", "w"] {
            assert_eq!(
                on_cluster::<i64>(&mut con, &["LOCK.RELEASE", &sem, token]),
                1
            );
        }
        assert_eq!(on_cluster::<i64>(&mut con, &["EXISTS", &sem]), 0);
    }
}

#[test]
fn a_replica_ignores_a_holder_whose_lease_ended_while_its_primary_is_silent() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let (_, a) = acquire(&mut p, "sem", 500, &["TOKEN", "a", "LIMIT", "2"]).unwrap();
    let a_deadline = expire_time(&mut p, "sem");
    let (_, b) = acquire(&mut p, "sem", 60_000, &["TOKEN", "b", "LIMIT", "2"]).unwrap();
    wait_replicated(&mut p);
    let on_replica = fence_of(&mut r, "sem", "a");
    if now_ms() < a_deadline {
        assert_eq!(on_replica, Some(a), "replicated while its lease runs");
    }
    // The primary freezes: no drop of a reaches the replica.
    primary.pause();
    eventually(
        Duration::from_secs(3),
        "a's lease ends on the replica",
        || fence_of(&mut r, "sem", "a").is_none(),
    );
    let info = lock_info(&mut r, "sem").unwrap();
    primary.resume();
    assert_eq!(info["holders"], Value::Int(1), "{info:?}");
    assert_eq!(info["fence"], Value::Int(b), "{info:?}");
    assert_eq!(fence_of(&mut r, "sem", "b"), Some(b));
    assert_eq!(fence(&mut r, "sem"), Some(b));
    assert_eq!(
        cmd("LOCK.FENCE")
            .arg("sem")
            .query::<Option<i64>>(&mut p)
            .unwrap(),
        Some(b)
    );
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
}

#[test]
fn a_rewrite_without_rdb_preamble_keeps_a_permanent_shared_lock_permanent() {
    let args = aof_always("no");
    let mut server = Server::with_args(&args);
    let mut con = server.connect();
    take(&mut con, "forever", "r1", 60_000, &["SHARED"]);
    take(&mut con, "forever", "r2", 50_000, &["SHARED"]);
    take(&mut con, "timed", "s1", 60_000, &["LIMIT", "2"]);
    assert_eq!(int(&mut con, &["PERSIST", "forever"]), 1);
    let digest =
        |con: &mut Connection| -> String { cmd("DEBUG").arg("DIGEST").query(con).unwrap() };
    let before = digest(&mut con);
    rewrite_aof(&mut con, Duration::from_secs(10));
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(int(&mut con, &["PTTL", "forever"]), -1);
    assert!(int(&mut con, &["PTTL", "timed"]) > 0);
    assert_eq!(digest(&mut con), before);
}

#[test]
fn a_persisted_shared_lock_loaded_from_rdb_goes_with_its_last_holder() {
    let mut server = Server::with_args(&["save", "3600 1"]);
    let mut con = server.connect();
    take(&mut con, "p", "a", 800, &["SHARED"]);
    take(&mut con, "p", "b", 600, &["SHARED"]);
    assert_eq!(int(&mut con, &["PERSIST", "p"]), 1);
    let _: () = cmd("SAVE").query(&mut con).unwrap();
    server.shutdown();
    server.restart();
    let mut con = server.connect();
    eventually(
        Duration::from_secs(3),
        "no key left after the last holder",
        || int(&mut con, &["EXISTS", "p"]) == 0,
    );
}

#[test]
fn a_promoted_replica_removes_a_permanent_shared_lock_with_its_last_holder() {
    let (mut primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    take(&mut p, "kept", "a", 400, &["SHARED"]);
    take(&mut p, "kept", "b", 600, &["SHARED"]);
    assert_eq!(int(&mut p, &["PERSIST", "kept"]), 1);
    wait_replicated(&mut p);
    primary.kill();
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    eventually(
        Duration::from_secs(4),
        "no key left after the last holder",
        || int(&mut r, &["EXISTS", "kept"]) == 0,
    );
}
