//! Replicas reach the primary's exact state through replicated effects, answer the
//! read-only LOCK.FENCE, refuse writes, and, once promoted, issue fences above every
//! fence the old primary issued, including grants they never received.

mod common;

use common::*;

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
        assert_eq!(
            int(&mut p, &["PEXPIRETIME", key]),
            int(&mut r, &["PEXPIRETIME", key]),
            "{key}"
        );
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
