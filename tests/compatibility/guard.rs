//! Guarded and fenced writes beyond one server's memory: replicas and the AOF carry
//! exactly the inner commands' effects and the marks (`DEBUG DIGEST` agrees), marks
//! survive an AOF restart with and without the RDB preamble, and the check itself
//! writes nothing.

use std::time::Duration;

use testkit::*;

/// Guarded and fenced writes, a refused one of each, and clock-dependent inner
/// commands (their relative expiry must reach replicas and the AOF as absolute).
fn guarded_writes(con: &mut Connection) {
    let (token, _) = acquire(con, "lock:{s}", 60_000, &[]).unwrap();
    for argv in [
        vec!["LOCK.GUARD", "lock:{s}", &token, "SET", "{s}:stock", "10"],
        vec!["LOCK.GUARD", "lock:{s}", &token, "DECRBY", "{s}:stock", "3"],
        vec![
            "LOCK.GUARD",
            "lock:{s}",
            &token,
            "SET",
            "{s}:note",
            "x",
            "EX",
            "600",
        ],
        vec![
            "LOCK.FENCED",
            "mark:{r}",
            "7",
            "SET",
            "{r}:row",
            "a",
            "PX",
            "600000",
        ],
        vec!["LOCK.FENCED", "mark:{r}", "9", "APPEND", "{r}:row", "b"],
    ] {
        let (name, rest) = argv.split_first().unwrap();
        let _: Value = cmd(name).arg(rest).query(con).expect("admitted");
    }
    let refused: redis::RedisResult<Value> = cmd("LOCK.GUARD")
        .arg("lock:{s}")
        .arg("not-the-token")
        .arg("SET")
        .arg("{s}:stock")
        .arg("0")
        .query(con);
    assert!(refused.is_err());
    let stale: redis::RedisResult<Value> = cmd("LOCK.FENCED")
        .arg("mark:{r}")
        .arg(8)
        .arg("SET")
        .arg("{r}:row")
        .arg("stale")
        .query(con);
    assert!(stale.is_err());
}

#[test]
fn a_replica_has_exactly_the_primarys_guarded_data_and_marks() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    guarded_writes(&mut p);
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
    let row: String = cmd("GET").arg("{r}:row").query(&mut r).unwrap();
    assert_eq!(row, "ab");
    let kind: String = cmd("TYPE").arg("mark:{r}").query(&mut r).unwrap();
    assert_eq!(kind, "fencemark");
}

fn aof_restart_keeps_marks(preamble: &str) {
    let mut server = Server::with_args(&aof_always(preamble));
    let mut con = server.connect();
    guarded_writes(&mut con);
    rewrite_aof(&mut con, Duration::from_secs(10));
    // Written after the rewrite: replayed from the AOF's tail.
    let _: Value = cmd("LOCK.FENCED")
        .arg("mark:{t}")
        .arg(3)
        .arg("SET")
        .arg("{t}:row")
        .arg("c")
        .query(&mut con)
        .unwrap();
    let before = digest(&mut con);
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(digest(&mut con), before, "preamble {preamble}");
    for (mark, below) in [("mark:{r}", 8), ("mark:{t}", 2)] {
        let stale: redis::RedisResult<Value> = cmd("LOCK.FENCED")
            .arg(mark)
            .arg(below)
            .arg("PING")
            .query(&mut con);
        assert!(
            format!("{stale:?}").contains("STALE"),
            "{mark} after restart"
        );
    }
}

#[test]
fn marks_and_guarded_data_survive_an_aof_restart_with_rdb_preamble() {
    aof_restart_keeps_marks("yes");
}

#[test]
fn marks_and_guarded_data_survive_an_aof_restart_without_rdb_preamble() {
    aof_restart_keeps_marks("no");
}

#[test]
fn marks_survive_an_rdb_restart() {
    let mut server = Server::start();
    let mut con = server.connect();
    guarded_writes(&mut con);
    let _: () = cmd("SAVE").query(&mut con).unwrap();
    let before = digest(&mut con);
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(digest(&mut con), before);
    let stale: redis::RedisResult<Value> = cmd("LOCK.FENCED")
        .arg("mark:{r}")
        .arg(8)
        .arg("PING")
        .query(&mut con);
    assert!(format!("{stale:?}").contains("STALE"));
}

#[test]
fn on_a_replica_guarded_reads_run_and_guarded_writes_are_read_only() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let (token, _) = acquire(&mut p, "lock:{s}", 60_000, &[]).unwrap();
    let _: () = cmd("SET").arg("{s}:stock").arg(4).query(&mut p).unwrap();
    wait_replicated(&mut p);
    let mut r = replica.connect();
    let read: String = cmd("LOCK.GUARD")
        .arg("lock:{s}")
        .arg(&token)
        .arg("GET")
        .arg("{s}:stock")
        .query(&mut r)
        .expect("a guarded read on the replica");
    assert_eq!(read, "4");
    let write: redis::RedisResult<Value> = cmd("LOCK.GUARD")
        .arg("lock:{s}")
        .arg(&token)
        .arg("SET")
        .arg("{s}:stock")
        .arg(0)
        .query(&mut r);
    assert_eq!(write.expect_err("read-only").code(), Some("READONLY"));
}
