//! Run-once records (`LOCK.ONCE` / `LOCK.DONE`) as every lock kind is checked: a
//! running claim and a done record survive `DEBUG RELOAD`, RDB and AOF restarts (with
//! and without the preamble), `DUMP`/`RESTORE` and `MIGRATE`, and a replica reaches
//! the same record (equal `DEBUG DIGEST`) from the replicated effects.

use std::time::Duration;

use testkit::*;

use crate::cluster::{key_per_node, Cluster, SlotMove};

/// A claim that runs: its fence.
fn run(con: &mut Connection, key: &str, token: &str, fingerprint: &str) -> i64 {
    let extra = ["TOKEN", token, "FINGERPRINT", fingerprint, "SESSION", "w"];
    match once_claim(con, key, 60_000, 120_000, &extra) {
        Value::Array(items) => match items.as_slice() {
            [_, Value::Int(fence)] => *fence,
            other => panic!("not a run: {other:?}"),
        },
        other => panic!("not a run: {other:?}"),
    }
}

/// The replay a duplicate gets of a done key.
fn replay(fence: i64, result: &str) -> Value {
    Value::Array(vec![
        Value::Nil,
        Value::Int(fence),
        Value::BulkString(result.as_bytes().to_vec()),
    ])
}

/// One key running (`running`, token `t1`, value `addr`) and one done (`done`, result `r`): their
/// fences.
fn one_of_each(con: &mut Connection) -> (i64, i64) {
    let running = run(con, "running", "t1", "fp1");
    // A value proclaimed on a run stays part of the run (a leader doing a job once).
    assert_eq!(int(con, &["LOCK.PROCLAIM", "running", "t1", "addr"]), 1);
    let done = run(con, "done", "t2", "fp2");
    assert_eq!(int(con, &["LOCK.DONE", "done", "t2", "r"]), 1);
    (running, done)
}

/// Both records are what `one_of_each` left: the run still held by `t1` (its
/// fingerprint kept), the done one replayed (its fingerprint kept).
fn assert_kept(con: &mut Connection, (running, done): (i64, i64), context: &str) {
    assert_eq!(fence_of(con, "running", "t1"), Some(running), "{context}");
    let info = lock_info(con, "running").unwrap();
    assert_eq!(
        info.get("state"),
        Some(&Value::SimpleString("running".into()))
    );
    assert_eq!(
        info.get("value"),
        Some(&Value::BulkString(b"addr".to_vec()))
    );
    assert_eq!(
        once_claim(con, "running", 1_000, 1_000, &[]),
        Value::Nil,
        "{context}: still running"
    );
    let refused = cmd("LOCK.ONCE")
        .arg("running")
        .arg(1_000)
        .arg("KEEP")
        .arg(1_000)
        .arg("FINGERPRINT")
        .arg("other")
        .query::<Value>(con)
        .unwrap_err();
    assert_eq!(refused.code(), Some("FINGERPRINT"), "{context}");
    assert_eq!(
        once_claim(con, "done", 1_000, 1_000, &[]),
        replay(done, "r"),
        "{context}"
    );
    assert_eq!(
        once_claim(con, "done", 1_000, 1_000, &["FINGERPRINT", "fp2"]),
        replay(done, "r"),
        "{context}"
    );
    let held: Vec<Value> = cmd("LOCK.HELD").arg("w").query(con).unwrap();
    assert_eq!(held.len(), 1, "{context}: the session holds the run only");
    assert_eq!(
        int(con, &["LOCK.DONE", "running", "t1", "late"]),
        1,
        "{context}"
    );
}

#[test]
fn debug_reload_and_rdb_restart_keep_running_and_done_records() {
    let mut server = Server::with_args(&["save", "3600 1"]);
    let mut con = server.connect();
    let fences = one_of_each(&mut con);
    let before = digest(&mut con);
    let deadlines = [
        int(&mut con, &["PEXPIRETIME", "running"]),
        int(&mut con, &["PEXPIRETIME", "done"]),
    ];
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(digest(&mut con), before, "DEBUG RELOAD");
    server.shutdown();
    server.restart();
    let mut con = server.connect();
    assert_eq!(digest(&mut con), before, "RDB restart");
    assert_eq!(int(&mut con, &["PEXPIRETIME", "running"]), deadlines[0]);
    assert_eq!(int(&mut con, &["PEXPIRETIME", "done"]), deadlines[1]);
    assert_kept(&mut con, fences, "RDB");
}

fn aof_round_trip(preamble: &str) {
    let args = aof_always(preamble);
    let mut server = Server::with_args(&args);
    let mut con = server.connect();
    let fences = one_of_each(&mut con);
    rewrite_aof(&mut con, Duration::from_secs(10));
    // And one after the rewrite, replayed from the AOF's tail.
    let late = run(&mut con, "late", "t3", "fp3");
    assert_eq!(int(&mut con, &["LOCK.DONE", "late", "t3", "tail"]), 1);
    let before = digest(&mut con);
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(digest(&mut con), before, "preamble {preamble}");
    assert_eq!(
        once_claim(&mut con, "late", 1_000, 1_000, &[]),
        replay(late, "tail")
    );
    assert_kept(&mut con, fences, &format!("AOF, preamble {preamble}"));
}

#[test]
fn aof_restart_with_rdb_preamble_keeps_run_once_records() {
    aof_round_trip("yes");
}

#[test]
fn aof_restart_without_rdb_preamble_replays_their_rewrite_form() {
    aof_round_trip("no");
}

#[test]
fn a_replica_reaches_the_same_records_from_the_effects() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let fences = one_of_each(&mut p);
    // A run given up and granted again reaches the replica as its effects too.
    let gone = run(&mut p, "gone", "t4", "fp4");
    assert_eq!(int(&mut p, &["LOCK.RELEASE", "gone", "t4"]), 1);
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
    for key in ["running", "done", "gone"] {
        assert_eq!(
            int(&mut p, &["PEXPIRETIME", key]),
            int(&mut r, &["PEXPIRETIME", key]),
            "{key}"
        );
    }
    assert_eq!(fence_of(&mut r, "running", "t1"), Some(fences.0));
    let info = lock_info(&mut r, "done").unwrap();
    assert_eq!(info.get("state"), Some(&Value::SimpleString("done".into())));
    assert_eq!(info.get("fence"), Some(&Value::Int(fences.1)));
    assert!(gone > 0 && lock_info(&mut r, "gone").is_none());
    let refused = cmd("LOCK.ONCE")
        .arg("x")
        .arg(1_000)
        .arg("KEEP")
        .arg(1_000)
        .query::<Value>(&mut r)
        .unwrap_err();
    assert_eq!(refused.code(), Some("READONLY"));
}

#[test]
fn dump_and_restore_carry_both_records_whole() {
    let server = Server::start();
    let mut con = server.connect();
    let (running, done) = one_of_each(&mut con);
    for (key, copy) in [("running", "running-copy"), ("done", "done-copy")] {
        let payload: Vec<u8> = cmd("DUMP").arg(key).query(&mut con).unwrap();
        let _: () = cmd("RESTORE")
            .arg(copy)
            .arg(0)
            .arg(&payload)
            .query(&mut con)
            .unwrap();
        for i in 0..payload.len() {
            let refused: redis::RedisResult<()> = cmd("RESTORE")
                .arg(format!("cut{i}"))
                .arg(0)
                .arg(&payload[..i])
                .query(&mut con);
            assert!(refused.is_err(), "a truncated payload is refused");
        }
    }
    assert_eq!(fence_of(&mut con, "running-copy", "t1"), Some(running));
    assert_eq!(
        once_claim(&mut con, "done-copy", 1_000, 1_000, &[]),
        replay(done, "r")
    );
    assert_eq!(int(&mut con, &["LOCK.DONE", "running-copy", "t1", "x"]), 1);
}

/// Resharding moves a run-once key with `MIGRATE`: the running claim goes with its
/// holder and waiters on the source are told to retry there; a done record goes with
/// its result.
#[test]
fn migrate_moves_a_running_claim_and_a_done_record_whole() {
    let cluster = Cluster::start();
    let keys = key_per_node(&cluster, "once:reshard");
    let key = keys[0].clone();
    let (source, target) = (&cluster.nodes[0], &cluster.nodes[1]);
    let mut from = source.connect();
    let mut to = target.connect();
    let fence = run(&mut from, &key, "t1", "fp");
    let mut waiter = testkit::resp::RawClient::connect(source.port);
    waiter.send(&[
        b"LOCK.ONCE",
        key.as_bytes(),
        b"30000",
        b"KEEP",
        b"30000",
        b"BLOCK",
        b"5000",
    ]);
    eventually(Duration::from_secs(5), "the duplicate waits", || {
        info_field(&mut from, "fencelock", "fencelock_waiters").as_deref() == Some("1")
    });
    let slot: i64 = cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query(&mut from)
        .unwrap();
    let moving = SlotMove::begin(source, target, slot);
    moving.migrate(&mut from, &key);
    let left_behind: i64 = cmd("DBSIZE").query(&mut from).unwrap();
    assert_eq!(left_behind, 0, "no run was granted on the source");
    moving.finish([1, 0, 2].map(|node| &cluster.nodes[node]));
    let answer = waiter.read_reply();
    assert!(
        !matches!(answer, testkit::resp::Reply::Array(Some(_))),
        "the duplicate on the source was granted a run held elsewhere: {answer:?}"
    );
    assert_eq!(fence_of(&mut to, &key, "t1"), Some(fence));
    assert_eq!(int(&mut to, &["LOCK.DONE", &key, "t1", "moved"]), 1);
    assert_eq!(
        once_claim(&mut to, &key, 1_000, 1_000, &[]),
        replay(fence, "moved")
    );
}
