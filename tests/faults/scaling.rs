//! What a command costs as a shared lock grows: per-holder commands (refresh, the
//! same-token retry, release, `LOCK.FENCE` and `LOCK.GUARD` with a token, `LOCK.INFO`,
//! a new holder) at 10,000 holders cost about what they cost at 10, and one release that
//! hands a lock to thousands of queued readers with chosen tokens costs about what it
//! costs with generated ones. Measured as the server's own time per call (`INFO
//! commandstats`), so the network does not count; the bounds leave room for a busy
//! machine and still catch a return to scanning (10,000 holders cost 30–90× before).
//! And an AOF without the RDB preamble loads a shared lock in O(n log n), and
//! `LOCK.INFO` counts thousands of waiters without walking them, and a wait's deadlock
//! check does not walk thousands of one session's waits.

use std::time::Duration;

use testkit::resp::RawClient;

use crate::reliability::scale::pick;
use testkit::*;

/// The server's mean time per call of `command`, in µs, since the last reset.
fn usec_per_call(con: &mut Connection, command: &str) -> f64 {
    let line = info_field(con, "commandstats", &format!("cmdstat_{command}"))
        .unwrap_or_else(|| panic!("no calls of {command}"));
    line.split(',')
        .find_map(|field| field.strip_prefix("usec_per_call="))
        .and_then(|value| value.parse().ok())
        .expect("usec_per_call")
}

/// Runs `argv` `times` times, pipelined.
fn repeat(con: &mut Connection, argv: &[String], times: usize) {
    let mut pipe = redis::pipe();
    for _ in 0..times {
        pipe.cmd(&argv[0]).arg(&argv[1..]).ignore();
    }
    let _: () = pipe.query(con).expect("pipeline");
}

/// `holders` readers of `rw` with the chosen tokens `reader-000000`…, pipelined in
/// rounds of 10,000.
fn readers(con: &mut Connection, holders: usize) {
    for chunk in (0..holders).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("LOCK.ACQUIRE")
                .arg("rw")
                .arg(600_000)
                .arg("SHARED")
                .arg("TOKEN")
                .arg(format!("reader-{i:06}"))
                .ignore();
        }
        let _: () = pipe.query(con).unwrap();
    }
}

/// Per-call cost of each per-holder command on a lock with `holders` chosen tokens.
fn costs_at(holders: usize) -> Vec<(&'static str, f64)> {
    let server = Server::with_module_args(&[], &["max-holders", "100000"]);
    let mut con = server.connect();
    readers(&mut con, holders);
    // The newest holder: the far end of any scan in grant order.
    let last = format!("reader-{:06}", holders - 1);
    let argv = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let commands: [(&str, Vec<String>); 5] = [
        (
            "lock.refresh",
            argv(&["LOCK.REFRESH", "rw", &last, "600000"]),
        ),
        (
            "lock.acquire",
            argv(&["LOCK.ACQUIRE", "rw", "600000", "SHARED", "TOKEN", &last]),
        ),
        ("lock.fence", argv(&["LOCK.FENCE", "rw", &last])),
        (
            "lock.guard",
            argv(&["LOCK.GUARD", "rw", &last, "ECHO", "x"]),
        ),
        ("lock.info", argv(&["LOCK.INFO", "rw"])),
    ];
    let mut costs = Vec::new();
    for (name, command) in commands {
        let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
        repeat(&mut con, &command, 2_000);
        costs.push((name, usec_per_call(&mut con, name)));
    }
    // A holder leaves and another comes, each with a chosen token.
    let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
    let mut pipe = redis::pipe();
    for i in 0..2_000 {
        let (leaving, coming) = if i % 2 == 0 {
            ("reader-000000", "extra")
        } else {
            ("extra", "reader-000000")
        };
        pipe.cmd("LOCK.RELEASE").arg("rw").arg(leaving).ignore();
        pipe.cmd("LOCK.ACQUIRE")
            .arg("rw")
            .arg(600_000)
            .arg("SHARED")
            .arg("TOKEN")
            .arg(coming)
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    costs.push(("lock.release", usec_per_call(&mut con, "lock.release")));
    costs.push((
        "lock.acquire (new holder)",
        usec_per_call(&mut con, "lock.acquire"),
    ));
    costs
}

#[test]
fn per_holder_commands_cost_the_same_at_10_and_10000_holders() {
    let small = costs_at(10);
    let large = costs_at(10_000);
    for ((name, at_10), (_, at_10000)) in small.iter().zip(&large) {
        eprintln!("{name}: {at_10:.2} µs at 10 holders, {at_10000:.2} µs at 10,000");
        // A floor of 1 µs: below it the ratio is timer noise.
        assert!(
            *at_10000 <= 5.0 * at_10.max(1.0),
            "{name}: {at_10000:.2} µs at 10,000 holders against {at_10:.2} µs at 10"
        );
    }
}

/// Server time of the one `LOCK.RELEASE` that grants `readers` queued readers, in ms.
fn handoff_ms(readers: usize, chosen_tokens: bool) -> f64 {
    let server = Server::with_args(&["maxclients", "10100"]);
    let mut con = server.connect();
    let (writer, _) = acquire(&mut con, "rw", 600_000, &[]).unwrap();
    let mut waiters: Vec<RawClient> = (0..readers)
        .map(|i| {
            let mut waiter = RawClient::connect(server.port);
            let token = format!("reader-{i:06}");
            let mut argv = vec!["LOCK.ACQUIRE", "rw", "600000", "SHARED"];
            if chosen_tokens {
                argv.extend(["TOKEN", &token]);
            }
            argv.extend(["BLOCK", "0"]);
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            waiter.send(&argv);
            waiter
        })
        .collect();
    wait_for_waiters(&mut con, "rw", i64::try_from(readers).unwrap());
    let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "rw", &writer]), 1);
    let ms = usec_per_call(&mut con, "lock.release") / 1_000.0;
    for waiter in &mut waiters {
        let reply = waiter.try_read_reply(Duration::from_secs(10));
        assert!(reply.and_then(|r| r.grant().map(|_| ())).is_some());
    }
    ms
}

#[test]
fn a_handoff_to_thousands_of_readers_costs_no_more_with_chosen_tokens() {
    let readers = pick(3_000, 8_000);
    let generated = handoff_ms(readers, false);
    let chosen = handoff_ms(readers, true);
    eprintln!("{readers} readers: {generated:.1} ms with generated tokens, {chosen:.1} ms chosen");
    assert!(
        chosen <= 3.0 * generated.max(1.0),
        "{chosen:.1} ms with chosen tokens against {generated:.1} ms generated"
    );
}

/// Seconds to start again from an AOF rewritten without the RDB preamble, whose
/// shared lock of `holders` holders replays as one `LOCK.APPLY` each.
fn aof_load_seconds(holders: usize) -> f64 {
    let args = [
        "appendonly",
        "yes",
        "aof-use-rdb-preamble",
        "no",
        "appendfsync",
        "no",
    ];
    let mut server = Server::with_module_args(&args, &["max-holders", "100000"]);
    let mut con = server.connect();
    readers(&mut con, holders);
    rewrite_aof(&mut con, Duration::from_secs(30));
    server.kill();
    let started = std::time::Instant::now();
    server.restart();
    let mut con = server.connect();
    eventually(Duration::from_secs(60), "loaded", || {
        info_field(&mut con, "persistence", "loading").as_deref() == Some("0")
    });
    let seconds = started.elapsed().as_secs_f64();
    let held: Vec<Value> = cmd("LOCK.INFO").arg("rw").query(&mut con).unwrap();
    assert!(!held.is_empty(), "the lock came back");
    seconds
}

#[test]
fn an_aof_without_preamble_loads_a_shared_lock_in_n_log_n() {
    let small = aof_load_seconds(4_000);
    let large = aof_load_seconds(40_000);
    eprintln!("AOF load: {small:.3} s at 4,000 holders, {large:.3} s at 40,000");
    // Ten times the holders: ten times the time and a little, not a hundred (a server
    // start is part of the small figure, so the floor is 20 ms; scanning took 1.5 s).
    assert!(
        large <= 20.0 * small.max(0.02),
        "{large:.3} s at 40,000 against {small:.3} s at 4,000"
    );
}

/// Server time of one `LOCK.INFO` on a lock with `waiters` queued (half of them shared).
fn info_cost_with_waiters(waiters: usize) -> f64 {
    let server = Server::with_args(&["maxclients", "10100"]);
    let mut con = server.connect();
    acquire(&mut con, "rw", 600_000, &[]).unwrap();
    let _queued: Vec<RawClient> = (0..waiters)
        .map(|i| {
            let mut waiter = RawClient::connect(server.port);
            let mut argv: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", b"rw", b"60000", b"BLOCK", b"0"];
            if i % 2 == 0 {
                argv.push(b"SHARED");
            }
            waiter.send(&argv);
            waiter
        })
        .collect();
    wait_for_waiters(&mut con, "rw", i64::try_from(waiters).unwrap());
    let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
    repeat(
        &mut con,
        &["LOCK.INFO".to_string(), "rw".to_string()],
        2_000,
    );
    usec_per_call(&mut con, "lock.info")
}

#[test]
fn lock_info_costs_the_same_at_10_and_thousands_of_waiters() {
    let many = pick(4_000, 8_000);
    let (few, lots) = (info_cost_with_waiters(10), info_cost_with_waiters(many));
    eprintln!("LOCK.INFO: {few:.2} µs with 10 waiters, {lots:.2} µs with {many}");
    // Walking the queue cost 2.8× at 4,000 waiters (14× at 15,000).
    assert!(
        lots <= 2.0 * few.max(1.0),
        "{lots:.2} µs with {many} waiters against {few:.2} µs with 10"
    );
}

/// Server time of one wait begun (`LOCK.ACQUIRE … BLOCK`, checked for a deadlock) for a
/// lock with `queue` waiters of one session, by that session and by another owner.
fn wait_cost_with_session_waiters(queue: usize) -> (f64, f64) {
    let server = Server::with_args(&["maxclients", "10100"]);
    let mut con = server.connect();
    acquire(&mut con, "k", 600_000, &["SESSION", "holder"]).unwrap();
    // Another owner that holds something, so its waits are searched.
    acquire(&mut con, "elsewhere", 600_000, &["SESSION", "another"]).unwrap();
    let wait = |session: &str| {
        let mut waiter = RawClient::connect(server.port);
        let argv = [
            "LOCK.ACQUIRE",
            "k",
            "60000",
            "SESSION",
            session,
            "BLOCK",
            "0",
        ];
        waiter.send(&argv.map(str::as_bytes));
        waiter
    };
    let queued: Vec<RawClient> = (0..queue).map(|_| wait("worker")).collect();
    wait_for_waiters(&mut con, "k", i64::try_from(queue).unwrap());
    // Waits of 1 ms, each answered before the next: Redis 7.2 and later count a
    // blocked command's time when it ends (its own work, not the wait). The least of
    // three rounds: a few µs a call, so one busy moment of the machine would double it.
    let mut cost = |session: &str| {
        let mut waiter = RawClient::connect(server.port);
        let argv = [
            "LOCK.ACQUIRE",
            "k",
            "60000",
            "SESSION",
            session,
            "BLOCK",
            "1",
        ];
        let mut round = || {
            let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
            for _ in 0..50 {
                assert!(waiter.call(&argv.map(str::as_bytes)).is_nil());
            }
            usec_per_call(&mut con, "lock.acquire")
        };
        (0..3).map(|_| round()).fold(f64::INFINITY, f64::min)
    };
    let same = cost("worker");
    let other = cost("another");
    drop(queued);
    (same, other)
}

#[test]
fn a_waits_deadlock_check_costs_the_same_at_10_and_thousands_of_one_sessions_waiters() {
    let many = pick(4_000, 8_000);
    let (few_same, few_other) = wait_cost_with_session_waiters(10);
    let (lots_same, lots_other) = wait_cost_with_session_waiters(many);
    eprintln!(
        "a wait begun: {few_same:.2}/{few_other:.2} µs (same session/another) with 10 \
         waiters, {lots_same:.2}/{lots_other:.2} µs with {many}"
    );
    assert!(
        // Linear would be some 1,000 µs here (as another owner's is): thrice is noise.
        lots_same <= 3.0 * few_same.max(5.0),
        "the same session's wait: {lots_same:.2} µs with {many} waiters, {few_same:.2} with 10"
    );
    // Another owner reaches the session once and passes each of its waits in the queue
    // once (0.3–0.8 µs a wait here): linear, where looking at every wait for each of
    // them was 16 ms at 4,000 (4 µs a wait).
    let per_wait = (lots_other - few_other) / many as f64;
    assert!(
        per_wait <= 2.5,
        "another owner's wait: {lots_other:.2} µs with {many} waiters of one session"
    );
}
