//! Replicas reach the primary's exact state through replicated effects, answer the
//! read-only LOCK.FENCE, refuse writes, and, once promoted, issue fences above every
//! fence the old primary issued, including grants they never received.

use std::time::Duration;

use testkit::*;

#[test]
fn replica_agrees_on_type_fence_deadline_and_digest() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let (t1, _) = acquire(&mut p, "a", 60_000, &[]).unwrap();
    acquire(&mut p, "b", 60_000, &["TOKEN", "bee"]).unwrap();
    acquire(&mut p, "b", 90_000, &["TOKEN", "bee"]).unwrap();
    let (t3, _) = acquire(&mut p, "c", 60_000, &[]).unwrap();
    assert_eq!(int(&mut p, &["LOCK.REFRESH", "a", &t1, "45000"]), 1);
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "c", &t3]), 1);
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
    for key in ["a", "b", "c"] {
        assert_eq!(fence(&mut p, key), fence(&mut r, key), "{key}");
        assert_eq!(expire_time(&mut p, key), expire_time(&mut r, key), "{key}");
        let kinds: Vec<String> = [&mut p, &mut r]
            .into_iter()
            .map(|con| cmd("TYPE").arg(key).query(con).unwrap())
            .collect();
        assert_eq!(kinds[0], kinds[1]);
    }
    let held: Option<i64> = cmd("LOCK.FENCE").arg("a").arg(&t1).query(&mut r).unwrap();
    assert_eq!(
        held,
        fence(&mut p, "a"),
        "LOCK.FENCE with token works on the replica"
    );
    let refused = cmd("LOCK.ACQUIRE")
        .arg("z")
        .arg(1000)
        .query::<redis::Value>(&mut r);
    let error = refused.expect_err("replicas refuse writes");
    assert_eq!(error.code(), Some("READONLY"));
}

#[test]
fn expiry_on_the_primary_reaches_the_replica() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    acquire(&mut p, "short", 50, &[]).unwrap();
    wait_replicated(&mut p);
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(fence(&mut p, "short"), None);
    wait_replicated(&mut p);
    assert_eq!(
        fence(&mut r, "short"),
        None,
        "logically expired on the replica too"
    );
}

#[test]
fn promoted_replica_issues_higher_fences_than_writes_it_missed() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    acquire(&mut p, "seen", 60_000, &[]).unwrap();
    wait_replicated(&mut p);
    // The link breaks; the primary keeps granting as fast as it can (pipelined), and
    // the replica never hears of it.
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("missed{i}"))
            .arg(60_000);
    }
    let grants: Vec<(String, i64)> = pipe.query(&mut p).unwrap();
    let missed = grants.iter().map(|(_, f)| *f).max().unwrap();
    // Failover takes at least a few milliseconds; then clients move to the new primary.
    std::thread::sleep(std::time::Duration::from_millis(5));
    for i in 0..100 {
        let (_, f) = acquire(&mut r, &format!("missed{i}"), 60_000, &[]).unwrap();
        assert!(
            f > missed,
            "{f} must exceed every fence of the old primary ({missed})"
        );
    }
}

#[test]
fn grants_from_before_a_replica_attached_and_after_it_agree() {
    let primary = Server::start();
    let mut p = primary.connect();
    let (early, _) = acquire(&mut p, "early", 60_000, &[]).unwrap();
    assert_eq!(int(&mut p, &["LOCK.REFRESH", "early", &early, "50000"]), 1);
    acquire(&mut p, "gone", 60_000, &["TOKEN", "g"]).unwrap();
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut r = replica.connect();
    acquire(&mut p, "late", 60_000, &[]).unwrap();
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "gone", "g"]), 1);
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
    for key in ["early", "late", "gone"] {
        assert_eq!(fence(&mut p, key), fence(&mut r, key), "{key}");
        assert_eq!(expire_time(&mut p, key), expire_time(&mut r, key));
    }
}

#[test]
fn a_replica_that_reconnects_catches_up_from_the_backlog() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    acquire(&mut p, "before", 60_000, &[]).unwrap();
    wait_replicated(&mut p);
    let killed: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut p)
        .unwrap();
    assert_eq!(killed, 1);
    let mut pipe = redis::pipe();
    for i in 0..200 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("while-away{i}"))
            .arg(60_000);
    }
    let _: Vec<(String, i64)> = pipe.query(&mut p).unwrap();
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
    let synced = info_field(&mut p, "stats", "sync_partial_ok").unwrap();
    assert_eq!(synced, "1", "caught up by partial resync, from the backlog");
}

#[test]
fn an_aof_switched_on_at_runtime_records_exact_effects() {
    let mut server = Server::start();
    let mut con = server.connect();
    let (before, _) = acquire(&mut con, "before", 60_000, &[]).unwrap();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg("always")
        .query(&mut con)
        .unwrap();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut con)
        .unwrap();
    eventually(std::time::Duration::from_secs(10), "AOF rewrite", || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
            && info_field(&mut con, "persistence", "aof_enabled").as_deref() == Some("1")
    });
    let (_, after_fence) = acquire(&mut con, "after", 60_000, &[]).unwrap();
    assert_eq!(
        int(&mut con, &["LOCK.REFRESH", "before", &before, "90000"]),
        1
    );
    let deadline = expire_time(&mut con, "before");
    let before_digest = digest(&mut con);
    server.kill();
    server.restart_with_args(&["appendonly", "yes"]);
    let mut con = server.connect();
    assert_eq!(digest(&mut con), before_digest);
    assert_eq!(fence(&mut con, "after"), Some(after_fence));
    assert_eq!(expire_time(&mut con, "before"), deadline);
}

/// `fencelock_fence_clock`: the highest fence issued or received. A replica shows the
/// primary's last grant once it has received it, even after the lock is gone (also one
/// made while it was paused); the next grant is above it.
#[test]
fn the_fence_clock_in_info_shows_how_far_grants_reached_the_replica() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let clock = |con: &mut Connection| -> i64 {
        info_field(con, "fencelock", "fencelock_fence_clock")
            .and_then(|value| value.parse().ok())
            .expect("fencelock_fence_clock in INFO fencelock")
    };
    let (token, first) = acquire(&mut p, "a", 60_000, &[]).unwrap();
    assert_eq!(
        clock(&mut p),
        first,
        "the primary's clock is its last grant"
    );
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "a", &token]), 1);
    wait_replicated(&mut p);
    assert_eq!(clock(&mut r), first, "the replica received that grant");
    replica.pause();
    let (_, unseen) = acquire(&mut p, "b", 60_000, &[]).unwrap();
    assert_eq!(clock(&mut p), unseen);
    replica.resume();
    wait_replicated(&mut p);
    assert_eq!(
        clock(&mut r),
        unseen,
        "and the one made while it was paused"
    );
    let (_, next) = acquire(&mut p, "c", 60_000, &[]).unwrap();
    assert!(next > unseen);
}

/// Waiting for replication covers everything the primary propagated, whoever wrote it:
/// `WAIT` counts only the writes of the connection it runs on, so on one that wrote
/// nothing (or around an eviction, which runs before a client's next command, a read
/// included) it returns at once, whatever the replica has applied.
#[test]
fn waiting_for_replication_covers_what_other_connections_wrote() {
    let (primary, replica) = primary_and_replica();
    let mut r = replica.connect();
    // The replica stops applying its primary's stream (writes are paused) but answers reads.
    let _: () = cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query(&mut r)
        .unwrap();
    let _: () = cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut primary.connect())
        .unwrap();
    assert!(
        !replicated_within(&mut primary.connect(), Duration::from_secs(1)),
        "the replica has not applied the write"
    );
    assert_eq!(int(&mut r, &["EXISTS", "k"]), 0);
    let _: () = cmd("CLIENT").arg("UNPAUSE").query(&mut r).unwrap();
    wait_replicated(&mut primary.connect());
    assert_eq!(int(&mut r, &["EXISTS", "k"]), 1);
}
