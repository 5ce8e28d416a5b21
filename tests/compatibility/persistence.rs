//! Locks and fences across DEBUG RELOAD, RDB and AOF restarts (with and without the RDB
//! preamble), restarts with no persistence, long downtimes, and corrupt RDB files.

use std::time::Duration;

use testkit::*;

#[test]
fn debug_reload_keeps_locks_and_fences_rise_after_it() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, fence) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    let deadline = expire_time(&mut con, "k");
    let before = digest(&mut con);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(digest(&mut con), before);
    assert_eq!(testkit::fence(&mut con, "k"), Some(fence));
    assert_eq!(expire_time(&mut con, "k"), deadline);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 1);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let (_, next) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    assert!(next > fence);
}

/// A fence far above the wall clock, so only persisted state can explain later fences
/// being even higher.
const FUTURE_FENCE: &str = "9000000000000000";

/// Pushes the fence clock to `FUTURE_FENCE` through a lock that is gone again: only
/// the clock itself remembers it.
fn raise_the_clock_and_leave_no_key(con: &mut Connection) {
    let _: () = cmd("LOCK.APPLY")
        .arg("gone")
        .arg("t")
        .arg(FUTURE_FENCE)
        .arg("PXAT")
        .arg(i64::MAX / 4)
        .query(con)
        .unwrap();
    assert_eq!(int(con, &["DEL", "gone"]), 1);
}

#[test]
fn rdb_restart_restores_locks_and_the_fence_clock_even_with_no_keys_left() {
    let mut server = Server::with_args(&["save", "3600 1"]);
    let mut con = server.connect();
    raise_the_clock_and_leave_no_key(&mut con);
    let (_, fence) = acquire(&mut con, "k", 60_000, &["TOKEN", "t"]).unwrap();
    assert!(fence > 9_000_000_000_000_000);
    let deadline = expire_time(&mut con, "k");
    let before = digest(&mut con);
    server.shutdown();
    server.restart();
    let mut con = server.connect();
    assert_eq!(digest(&mut con), before);
    assert_eq!(testkit::fence(&mut con, "k"), Some(fence));
    assert_eq!(expire_time(&mut con, "k"), deadline);
    let (_, next) = acquire(&mut con, "other", 1_000, &[]).unwrap();
    assert!(
        next > fence,
        "aux data restored the clock: {next} > {fence}"
    );
}

/// A held lock (refreshed) and a released one before the AOF rewrite, a grant after it.
fn lock_aof_round_trip(preamble: &str) {
    aof_round_trip(
        preamble,
        Rewrite::Between,
        |_, con| {
            let (token, fence) = acquire(con, "held", 60_000, &[]).unwrap();
            let (released, _) = acquire(con, "released", 60_000, &[]).unwrap();
            assert_eq!(int(con, &["LOCK.RELEASE", "released", &released]), 1);
            assert_eq!(int(con, &["LOCK.REFRESH", "held", &token, "120000"]), 1);
            (fence, expire_time(con, "held"))
        },
        |_, con, held| {
            let late = acquire(con, "late", 60_000, &[]).unwrap();
            (held, late, digest(con))
        },
        |con, ((fence, deadline), (late, late_fence), before)| {
            assert_eq!(digest(con), before, "preamble {preamble}");
            assert_eq!(testkit::fence(con, "held"), Some(fence));
            assert_eq!(expire_time(con, "held"), deadline);
            assert_eq!(testkit::fence(con, "released"), None);
            assert_eq!(int(con, &["LOCK.RELEASE", "late", &late]), 1);
            let (_, next) = acquire(con, "late", 60_000, &[]).unwrap();
            assert!(next > late_fence);
        },
    );
}

#[test]
fn aof_restart_with_rdb_preamble() {
    lock_aof_round_trip("yes");
}

#[test]
fn aof_restart_without_rdb_preamble_uses_the_rewrite_form() {
    lock_aof_round_trip("no");
}

#[test]
fn aof_replayed_after_the_lease_ran_out_shows_it_expired() {
    let args = aof_always("no");
    let mut server = Server::with_args(&args);
    let mut con = server.connect();
    let (token, fence) = acquire(&mut con, "k", 300, &[]).unwrap();
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "k", &token, "400"]), 1);
    server.kill();
    std::thread::sleep(Duration::from_millis(600));
    server.restart();
    let mut con = server.connect();
    assert_eq!(testkit::fence(&mut con, "k"), None, "not renewed by replay");
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "k", &token, "10000"]), 0);
    let (_, next) = acquire(&mut con, "k", 1_000, &[]).unwrap();
    assert!(next > fence);
}

/// An AOF rewritten without the RDB preamble has no aux data: the fence clock's
/// high-water mark travels as `LOCK.CLOCK` before the first lock or mark, so fences
/// stay above one that no key holds any more.
#[test]
fn aof_rewrite_without_preamble_keeps_the_fence_clock() {
    let args = aof_always("no");
    let mut server = Server::with_args(&args);
    let mut con = server.connect();
    raise_the_clock_and_leave_no_key(&mut con);
    let _: () = cmd("LOCK.FENCED")
        .arg("mark")
        .arg(5)
        .arg("SET")
        .arg("data")
        .arg("v")
        .query(&mut con)
        .unwrap();
    rewrite_aof(&mut con, Duration::from_secs(10));
    server.kill();
    server.restart();
    let mut con = server.connect();
    let (_, next) = acquire(&mut con, "k", 1_000, &[]).unwrap();
    assert!(
        next > 9_000_000_000_000_000,
        "the rewrite carried the clock: {next}"
    );
}

#[test]
fn restart_without_persistence_still_gives_higher_fences() {
    let mut server = Server::start();
    let mut con = server.connect();
    let (_, fence) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(testkit::fence(&mut con, "k"), None, "nothing persisted");
    let (_, next) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    assert!(
        next > fence,
        "the hybrid clock follows wall time: {next} > {fence}"
    );
}

#[test]
fn a_truncated_rdb_fails_the_load_without_a_crash_report() {
    let mut server = Server::with_args(&["save", "3600 1"]);
    let mut con = server.connect();
    for i in 0..50 {
        acquire(
            &mut con,
            &format!("lock:{i}"),
            600_000,
            &["TOKEN", &"t".repeat(200)],
        )
        .unwrap();
    }
    server.shutdown();
    let rdb = server.dir.join("dump.rdb");
    let bytes = std::fs::read(&rdb).unwrap();
    std::fs::write(&rdb, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let _ = std::fs::remove_file(server.dir.join("redis.log"));
    let mut loading = testkit::Guarded::spawn(
        std::process::Command::new(server_binary())
            .arg("--port")
            .arg(server.port.to_string())
            .arg("--dir")
            .arg(&server.dir)
            .arg("--loadmodule")
            .arg(module_path())
            .arg("--logfile")
            .arg(server.dir.join("redis.log"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
    .unwrap();
    // Redis exits once it has reported the bad file. Valkey 9.1's own RDB checker can
    // spin on a truncated module value after reporting it; bound the wait either way.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let exited = loop {
        if let Some(status) = loading.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = loading.kill();
            let _ = loading.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = server.log();
    if let Some(status) = exited {
        assert!(!status.success(), "loading must fail: {log}");
    }
    assert!(!log.contains("crashed by signal"), "{log}");
    assert!(
        log.contains("Short read") || log.contains("Unexpected EOF"),
        "the load failure is reported: {log}"
    );
    assert!(!log.contains("Ready to accept connections"), "{log}");
}

#[test]
fn corrupted_dump_payloads_are_refused_by_restore() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "k", 60_000, &["TOKEN", "tok"]).unwrap();
    let payload: Vec<u8> = cmd("DUMP").arg("k").query(&mut con).unwrap();
    let _: () = cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(&payload)
        .query(&mut con)
        .unwrap();
    assert_eq!(fence(&mut con, "copy"), fence(&mut con, "k"));
    for i in 0..payload.len() {
        let mut bad = payload.clone();
        bad[i] ^= 0x5a;
        let _: redis::RedisResult<()> = cmd("RESTORE")
            .arg(format!("bad{i}"))
            .arg(0)
            .arg(&bad)
            .query(&mut con);
        let truncated = &payload[..i];
        let refused: redis::RedisResult<()> = cmd("RESTORE")
            .arg(format!("cut{i}"))
            .arg(0)
            .arg(truncated)
            .query(&mut con);
        assert!(refused.is_err());
    }
    let pong: String = cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

/// `tests/fixtures/locks-v0.rdb` was saved by the module's first release (RDB encoding
/// 0) with three locks made permanent (`PERSIST`, so the fixture never expires): a
/// generated token, a client-chosen one, and a 300-byte one; plus a plain string.
#[test]
fn an_rdb_written_by_the_first_release_loads() {
    let mut server = Server::start();
    server.shutdown();
    let fixture = testkit::paths::workspace_root().join("tests/fixtures/locks-v0.rdb");
    std::fs::copy(&fixture, server.dir.join("locks-v0.rdb")).expect("copy the fixture");
    server.restart_with_args(&["dbfilename", "locks-v0.rdb"]);
    let mut con = server.connect();
    let long = "t".repeat(300);
    for (key, token, fence) in [
        (
            "lock:generated",
            "3a49ce95a094aaa3728bfea25b6a4b2f",
            1_796_082_249_466_948,
        ),
        ("lock:named", "worker-1", 1_796_082_249_471_194),
        ("lock:long", long.as_str(), 1_796_082_249_607_353),
    ] {
        let held: Option<i64> = cmd("LOCK.FENCE")
            .arg(key)
            .arg(token)
            .query(&mut con)
            .unwrap();
        assert_eq!(held, Some(fence), "{key}");
        let kind: String = cmd("TYPE").arg(key).query(&mut con).unwrap();
        assert_eq!(kind, "fencelock");
    }
    let plain: String = cmd("GET").arg("plain:string").query(&mut con).unwrap();
    assert_eq!(plain, "v");
    assert_eq!(
        int(&mut con, &["LOCK.RELEASE", "lock:named", "worker-1"]),
        1
    );
    let (_, fence) = acquire(&mut con, "lock:named", 1_000, &[]).unwrap();
    assert!(
        fence > 1_796_082_249_607_353,
        "fences rise past the loaded ones"
    );
}
