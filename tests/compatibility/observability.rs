//! `LOCK.TOP` and the hold distribution across persistence and replication: a lock
//! loaded from the RDB (`DEBUG RELOAD`) or received by a replica is listed there with
//! how long it has been held since its grant (its fence, the granting server's clock),
//! and its end is counted where it ends.

use testkit::*;

fn top_keys(con: &mut Connection, args: &[&str]) -> Vec<(String, i64, i64, i64)> {
    cmd("LOCK.TOP").arg(args).query(con).expect("LOCK.TOP")
}

fn holds(con: &mut Connection) -> u64 {
    info_field(con, "fencelock", "fencelock_holds")
        .and_then(|v| v.parse().ok())
        .expect("fencelock_holds")
}

#[test]
fn a_lock_loaded_from_the_rdb_is_listed_and_counts_from_its_grant() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, fence) = hold(&mut con, "kept", 60_000, &[]);
    hold(&mut con, "shared", 60_000, &["SHARED"]);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let mut listed: Vec<String> = top_keys(&mut con, &["BY", "held"])
        .into_iter()
        .map(|entry| entry.0)
        .collect();
    listed.sort();
    assert_eq!(listed, ["kept", "shared"]);
    // Its age runs from the grant's fence, not from the reload.
    let (seconds, micros): (i64, i64) = cmd("TIME").query(&mut con).unwrap();
    let entry = top_keys(&mut con, &["BY", "held"])
        .into_iter()
        .find(|entry| entry.0 == "kept")
        .expect("kept listed");
    // Both sides truncated to whole ms: at most 1 apart the other way.
    let age_then = seconds * 1_000 + micros / 1_000 - fence_ms(fence);
    assert!(entry.3 + 1 >= age_then, "{entry:?} vs {age_then} ms");
    let before = holds(&mut con);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "kept", &token]), 1);
    assert_eq!(holds(&mut con), before + 1);
    let _: () = cmd("FLUSHALL").query(&mut con).unwrap();
    assert_eq!(top_keys(&mut con, &[]), []);
}

#[test]
fn a_replica_lists_the_locks_it_received_and_counts_their_ends() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let (token, _) = hold(&mut p, "lock:r", 60_000, &[]);
    hold(&mut p, "lock:s", 60_000, &["SHARED"]);
    wait_replicated(&mut p);
    let mut listed: Vec<String> = top_keys(&mut r, &[]).into_iter().map(|e| e.0).collect();
    listed.sort();
    assert_eq!(listed, ["lock:r", "lock:s"]);
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "lock:r", &token]), 1);
    wait_replicated(&mut p);
    assert_eq!(
        holds(&mut r),
        1,
        "the release reached the replica as its end"
    );
    let listed: Vec<String> = top_keys(&mut r, &[]).into_iter().map(|e| e.0).collect();
    assert_eq!(listed, ["lock:s"]);
    // A run that LOCK.DONE finishes ends its holding on the replica too.
    once_claim(&mut p, "lock:job", 60_000, 60_000, &["TOKEN", "run"]);
    assert_eq!(int(&mut p, &["LOCK.DONE", "lock:job", "run", "ok"]), 1);
    wait_replicated(&mut p);
    assert_eq!(holds(&mut r), 2, "the run's end reached the replica");
    assert_eq!(holds(&mut p), 2);
}

/// A restart from the AOF replays the releases, deletes and `LOCK.DONE`s of holdings
/// that ended before it: they were counted then, and the distributions start from
/// nothing at a restart, so the replay counts none of them.
#[test]
fn an_aof_replay_counts_no_holding_that_ended_before_the_restart() {
    let mut server = Server::with_args(&aof_always("no"));
    let mut con = server.connect();
    let (token, _) = hold(&mut con, "c", 60_000, &[]);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "c", &token]), 1);
    hold(&mut con, "d", 60_000, &[]);
    assert_eq!(int(&mut con, &["DEL", "d"]), 1);
    once_claim(&mut con, "job", 60_000, 60_000, &["TOKEN", "run"]);
    assert_eq!(int(&mut con, &["LOCK.DONE", "job", "run", "ok"]), 1);
    assert_eq!(holds(&mut con), 3);
    server.restart();
    let mut con = server.connect();
    assert_eq!(holds(&mut con), 0);
    // What happens after the load is counted again.
    let (token, _) = hold(&mut con, "e", 60_000, &[]);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "e", &token]), 1);
    assert_eq!(holds(&mut con), 1);
}
