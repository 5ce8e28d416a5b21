//! Server-side waiting: FIFO handoff on release, expiry and deletion; timeouts;
//! disconnects; CLIENT UNBLOCK; no blocking inside MULTI or scripts; limits; events;
//! LOCK.INFO and INFO counters; replicas after handoffs.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use testkit::resp::{RawClient, Reply};
use testkit::*;

/// Starts a waiter on its own connection; its grant (or nil) arrives on the channel.
fn spawn_waiter(
    server: &Server,
    key: &str,
    ttl: i64,
    extra: &[&str],
) -> mpsc::Receiver<(Option<(String, i64)>, Instant)> {
    let (tx, rx) = mpsc::channel();
    let mut con = server.connect();
    let key = key.to_string();
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    thread::spawn(move || {
        let grant: Option<(String, i64)> = cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg(ttl)
            .arg(&extra)
            .query(&mut con)
            .unwrap();
        let _ = tx.send((grant, Instant::now()));
        // Keep the connection open until the test is done with the grant.
        thread::sleep(Duration::from_secs(30));
    });
    rx
}

#[test]
fn twenty_waiters_are_served_in_arrival_order() {
    let server = Server::start();
    let mut con = server.connect();
    let (holder, first_fence) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    let mut receivers = Vec::new();
    for i in 0..20 {
        receivers.push(spawn_waiter(
            &server,
            "k",
            60_000,
            &["TOKEN", &format!("w{i}"), "BLOCK", "0"],
        ));
        wait_for_waiters(&mut con, "k", i + 1);
    }
    let mut previous = first_fence;
    let mut release_token = holder;
    for (i, rx) in receivers.iter().enumerate() {
        assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &release_token]), 1);
        let (grant, _) = rx.recv_timeout(Duration::from_secs(5)).expect("granted");
        let (token, fence) = grant.expect("not nil");
        assert_eq!(token, format!("w{i}"), "FIFO");
        assert!(fence > previous);
        previous = fence;
        release_token = token;
    }
}

#[test]
fn busy_without_block_stays_nil_while_others_wait() {
    let server = Server::start();
    let mut con = server.connect();
    let (holder, _) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    let rx = spawn_waiter(&server, "k", 60_000, &["BLOCK", "0", "TOKEN", "first"]);
    wait_for_waiters(&mut con, "k", 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &holder]), 1);
    // The waiter became the holder in the release itself: a newcomer finds it busy.
    assert_eq!(acquire(&mut con, "k", 1_000, &[]), None);
    let (grant, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(grant.unwrap().0, "first");
}

/// A held key `k` and one blocked waiter; `release` frees it (given the holder's
/// token); the waiter must be granted in that same step (the key is held again and
/// nobody waits as soon as `release` returns, before the waiter's reply is read) and
/// then hold the lock. An ordering, not a figure: a busy machine delays the reply, not
/// the order of the server's steps.
fn released_lock_goes_to_the_waiter(release: impl FnOnce(&mut Connection, &str)) {
    let server = Server::start();
    let mut con = server.connect();
    let (holder, _) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    let rx = spawn_waiter(&server, "k", 5_000, &["BLOCK", "10000"]);
    wait_for_waiters(&mut con, "k", 1);
    release(&mut con, &holder);
    assert_eq!(
        waiters(&mut con, "k"),
        0,
        "the waiter was served in the release"
    );
    assert_eq!(int(&mut con, &["EXISTS", "k"]), 1, "and holds the lock");
    let (grant, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let (token, fence) = grant.expect("the waiter was granted");
    assert_eq!(testkit::fence(&mut con, "k"), Some(fence));
    let held: Option<i64> = cmd("LOCK.FENCE")
        .arg("k")
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert_eq!(held, Some(fence));
}

#[test]
fn release_hands_off_promptly() {
    released_lock_goes_to_the_waiter(|con, holder| {
        assert_eq!(int(con, &["LOCK.RELEASE", "k", holder]), 1);
    });
}

#[test]
fn a_release_inside_a_transaction_hands_off_when_the_transaction_ends() {
    released_lock_goes_to_the_waiter(|con, holder| {
        let (released, latecomer): (i64, Option<(String, i64)>) = redis::pipe()
            .atomic()
            .cmd("LOCK.RELEASE")
            .arg("k")
            .arg(holder)
            .cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg(1_000)
            .query(con)
            .unwrap();
        assert_eq!(released, 1);
        assert_eq!(latecomer, None, "an acquire overtook the queued waiter");
    });
}

#[test]
fn expiry_hands_off_within_ten_milliseconds_of_the_deadline() {
    let server = Server::start();
    let mut con = server.connect();
    // Only the module's own timer can end the keys (nothing else touches them): Redis's
    // expiry cycle, the slow path this test tells apart, is off.
    without_active_expiry(&mut con);
    let mut lateness = Vec::new();
    for round in 0..5 {
        let key = format!("k{round}");
        acquire(&mut con, &key, 300, &[]).unwrap();
        let deadline = expire_time(&mut con, &key);
        let rx = spawn_waiter(&server, &key, 5_000, &["BLOCK", "0"]);
        wait_for_waiters(&mut con, &key, 1);
        let (grant, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let (_, fence) = grant.expect("handed off");
        // On the server's clock (the grant's fence): the test's threads, which a busy
        // machine delays most, do not count.
        lateness.push(fence_ms(fence) - deadline);
    }
    lateness.sort_unstable();
    assert!(lateness[0] >= 0, "never before the deadline: {lateness:?}");
    assert!(
        lateness[2] <= 10,
        "median handoff within 10 ms: {lateness:?}"
    );
}

#[test]
fn block_timeout_answers_nil_and_leaves_the_queue() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "k", 60_000, &[]).unwrap();
    let started = Instant::now();
    let mut waiter = server.connect();
    assert_eq!(acquire(&mut waiter, "k", 1_000, &["BLOCK", "150"]), None);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(140) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(waiters(&mut con, "k"), 0);
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_block_timeouts").as_deref(),
        Some("1")
    );
}

#[test]
fn block_zero_waits_until_the_lock_is_free() {
    let server = Server::start();
    let mut con = server.connect();
    let (holder, _) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    let rx = spawn_waiter(&server, "k", 1_000, &["BLOCK", "0"]);
    assert!(
        rx.recv_timeout(Duration::from_millis(400)).is_err(),
        "still waiting"
    );
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &holder]), 1);
    assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap().0.is_some());
}

#[test]
fn a_disconnected_waiter_leaves_the_queue() {
    let server = Server::start();
    let mut con = server.connect();
    let (holder, _) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    {
        let mut gone = RawClient::connect(server.port);
        gone.send(&[
            b"LOCK.ACQUIRE",
            b"k",
            b"60000",
            b"TOKEN",
            b"gone",
            b"BLOCK",
            b"0",
        ]);
        wait_for_waiters(&mut con, "k", 1);
    }
    wait_for_waiters(&mut con, "k", 0);
    let rx = spawn_waiter(&server, "k", 60_000, &["BLOCK", "0", "TOKEN", "next"]);
    wait_for_waiters(&mut con, "k", 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &holder]), 1);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5))
            .unwrap()
            .0
            .unwrap()
            .0,
        "next"
    );
}

fn client_id(con: &mut Connection) -> i64 {
    cmd("CLIENT").arg("ID").query(con).unwrap()
}

#[test]
fn a_grant_to_a_client_gone_before_its_reply_is_passed_on() {
    let server = Server::start();
    let mut con = server.connect();
    let (holder, _) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    let mut doomed = server.connect();
    let doomed_id = client_id(&mut doomed);
    let mut doomed_raw = doomed;
    thread::spawn(move || {
        let _: redis::RedisResult<Value> = cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg(60_000)
            .arg("TOKEN")
            .arg("doomed")
            .arg("BLOCK")
            .arg(0)
            .query(&mut doomed_raw);
    });
    wait_for_waiters(&mut con, "k", 1);
    let rx = spawn_waiter(&server, "k", 60_000, &["BLOCK", "0", "TOKEN", "survivor"]);
    wait_for_waiters(&mut con, "k", 2);
    // Release (handing off to `doomed`) and kill `doomed` in one atomic step: the grant
    // cannot reach it.
    let (released, killed): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg(&holder)
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(doomed_id)
        .query(&mut con)
        .unwrap();
    assert_eq!((released, killed), (1, 1));
    let (grant, _) = rx
        .recv_timeout(Duration::from_secs(2))
        .expect("passed on, not held for the ttl");
    assert_eq!(grant.unwrap().0, "survivor");
}

#[test]
fn client_unblock_answers_nil_or_the_unblocked_error() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "k", 60_000, &[]).unwrap();
    for (mode, expected) in [
        (None, Reply::Bulk(None)),
        (Some("TIMEOUT"), Reply::Bulk(None)),
        (
            Some("ERROR"),
            Reply::Error("UNBLOCKED client unblocked via CLIENT UNBLOCK".into()),
        ),
    ] {
        let mut waiter = RawClient::connect(server.port);
        let Reply::Integer(id) = waiter.call_str(&["CLIENT", "ID"]) else {
            panic!()
        };
        waiter.send(&[b"LOCK.ACQUIRE", b"k", b"1000", b"BLOCK", b"0"]);
        wait_for_waiters(&mut con, "k", 1);
        let mut unblock = cmd("CLIENT");
        unblock.arg("UNBLOCK").arg(id);
        if let Some(mode) = mode {
            unblock.arg(mode);
        }
        assert_eq!(unblock.query::<i64>(&mut con).unwrap(), 1);
        assert_eq!(waiter.read_reply(), expected, "{mode:?}");
        assert_eq!(waiters(&mut con, "k"), 0, "{mode:?}");
        assert_eq!(waiter.call_str(&["PING"]), Reply::Status("PONG".into()));
    }
}

#[test]
fn block_does_not_block_inside_multi_or_scripts() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "k", 60_000, &[]).unwrap();
    let (in_multi,): (Option<(String, i64)>,) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(1000)
        .arg("BLOCK")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(in_multi, None);
    let script: Option<Vec<Value>> = cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 1000, 'BLOCK', 0)")
        .arg(1)
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert_eq!(script, None);
    let free: Vec<Value> = cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 1000, 'BLOCK', 0)")
        .arg(1)
        .arg("free")
        .query(&mut con)
        .unwrap();
    // Each `BLOCK 0` above would wait forever had it waited: that it answered is the
    // proof it did not (no wall-clock bound a busy machine could break).
    assert_eq!(free.len(), 2, "granted at once when free");
}

#[test]
fn deleting_or_flushing_a_held_key_hands_it_to_the_first_waiter() {
    let server = Server::start();
    let mut con = server.connect();
    for (round, wipe) in ["DEL", "FLUSHALL", "UNLINK"].iter().enumerate() {
        let (_, old_fence) = acquire(&mut con, "k", 60_000, &[]).unwrap();
        let rx = spawn_waiter(
            &server,
            "k",
            60_000,
            &["BLOCK", "0", "TOKEN", &format!("w{round}")],
        );
        wait_for_waiters(&mut con, "k", 1);
        let mut wipe_cmd = cmd(wipe);
        if *wipe != "FLUSHALL" {
            wipe_cmd.arg("k");
        }
        let _: Value = wipe_cmd.query(&mut con).unwrap();
        let (grant, _) = rx.recv_timeout(Duration::from_secs(2)).expect("handed off");
        let (token, fence) = grant.unwrap();
        assert_eq!(token, format!("w{round}"));
        assert!(fence > old_fence);
        assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 1);
    }
}

#[test]
fn too_many_waiters_is_an_error() {
    let server = Server::with_module_args(&[], &["max-waiters", "2"]);
    let mut con = server.connect();
    acquire(&mut con, "k", 60_000, &[]).unwrap();
    let _a = spawn_waiter(&server, "k", 1_000, &["BLOCK", "0"]);
    let _b = spawn_waiter(&server, "k", 1_000, &["BLOCK", "0"]);
    wait_for_waiters(&mut con, "k", 2);
    let mut raw = RawClient::connect(server.port);
    assert_eq!(
        raw.call_str(&["LOCK.ACQUIRE", "k", "1000", "BLOCK", "0"]),
        Reply::Error("ERR too many waiters".into())
    );
    assert_eq!(
        raw.call_str(&["LOCK.ACQUIRE", "k", "1000"]),
        Reply::Bulk(None),
        "non-blocking still answers nil"
    );
    let limit: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("fencelock.max-waiters")
        .query(&mut con)
        .unwrap();
    assert_eq!(limit[1], "2");
}

#[test]
fn ten_thousand_waiters_on_one_key_are_all_served_in_turn() {
    let server = Server::with_args(&["maxclients", "10500"]);
    let mut con = server.connect();
    let (mut token, mut last_fence) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    let mut waiters_raw: Vec<RawClient> = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let mut client = RawClient::connect(server.port);
        let name = format!("w{i}");
        client.send(&[
            b"LOCK.ACQUIRE",
            b"k",
            b"60000",
            b"TOKEN",
            name.as_bytes(),
            b"BLOCK",
            b"0",
        ]);
        waiters_raw.push(client);
    }
    wait_for_waiters(&mut con, "k", 10_000);
    let started = Instant::now();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 1);
    for (i, client) in waiters_raw.iter_mut().enumerate() {
        let Reply::Array(Some(grant)) = client.read_reply() else {
            panic!("waiter {i}")
        };
        let Reply::Bulk(Some(name)) = &grant[0] else {
            panic!()
        };
        let Reply::Integer(fence) = grant[1] else {
            panic!()
        };
        assert_eq!(name, format!("w{i}").as_bytes());
        assert!(fence > last_fence);
        last_fence = fence;
        token = String::from_utf8(name.clone()).unwrap();
        assert_eq!(
            client.call(&[b"LOCK.RELEASE", b"k", token.as_bytes()]),
            Reply::Integer(1)
        );
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(waiters(&mut con, "k"), 0);
    assert_eq!(int(&mut con, &["EXISTS", "k"]), 0);
}

#[test]
fn replica_agrees_after_handoffs() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let (mut holder, _) = acquire(&mut p, "k", 60_000, &[]).unwrap();
    let receivers: Vec<_> = (0..5)
        .map(|i| {
            let rx = spawn_waiter(&primary, "k", 60_000, &["BLOCK", "0"]);
            wait_for_waiters(&mut p, "k", i + 1);
            rx
        })
        .collect();
    for rx in &receivers {
        assert_eq!(int(&mut p, &["LOCK.RELEASE", "k", &holder]), 1);
        holder = rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .0
            .unwrap()
            .0;
    }
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
    assert_eq!(testkit::fence(&mut p, "k"), testkit::fence(&mut r, "k"));
    assert_eq!(expire_time(&mut p, "k"), expire_time(&mut r, "k"));
    let on_replica: Option<i64> = cmd("LOCK.FENCE")
        .arg("k")
        .arg(&holder)
        .query(&mut r)
        .unwrap();
    assert!(
        on_replica.is_some(),
        "the last waiter holds it on the replica too"
    );
}

#[test]
fn lock_info_reports_fence_ttl_waiters_and_never_the_token() {
    let server = Server::start();
    let mut con = server.connect();
    let nil: Option<Vec<Value>> = cmd("LOCK.INFO").arg("k").query(&mut con).unwrap();
    assert_eq!(nil, None, "free and nobody waits");
    let (token, fence) = acquire(&mut con, "k", 60_000, &["TOKEN", "secret-token"]).unwrap();
    let _w = spawn_waiter(&server, "k", 1_000, &["BLOCK", "0"]);
    wait_for_waiters(&mut con, "k", 1);
    let info: Vec<Value> = cmd("LOCK.INFO").arg("k").query(&mut con).unwrap();
    let text = format!("{info:?}");
    assert!(!text.contains(&token), "{text}");
    let fields = lock_info(&mut con, "k").unwrap();
    let get = |name: &str| -> i64 {
        let value = fields
            .get(name)
            .unwrap_or_else(|| panic!("{name} in {text}"));
        redis::from_redis_value(value.clone()).unwrap()
    };
    assert_eq!(get("held"), 1);
    assert_eq!(get("fence"), fence);
    assert!(get("ttl-ms") > 50_000 && get("ttl-ms") <= 60_000);
    assert_eq!(get("waiters"), 1);
}

#[test]
fn keyspace_notifications_announce_every_lock_event() {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber =
        keyspace_subscriber(&server, &mut con, &["PSUBSCRIBE", "__keyspace@0__:lock:*"]);
    let (token, _) = acquire(&mut con, "lock:a", 60_000, &[]).unwrap();
    assert_eq!(
        int(&mut con, &["LOCK.REFRESH", "lock:a", &token, "60000"]),
        1
    );
    let rx = spawn_waiter(&server, "lock:a", 50, &["BLOCK", "0"]);
    wait_for_waiters(&mut con, "lock:a", 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "lock:a", &token]), 1);
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    // The waiter's 50 ms lease runs out while held.
    let expected = [
        "lock.acquired",
        "lock.refreshed",
        "lock.released",
        "lock.acquired",
        "lock.handoff",
        "lock.expired",
    ];
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        let Reply::Array(Some(message)) = subscriber.read_reply() else {
            panic!()
        };
        let Reply::Bulk(Some(event)) = &message[3] else {
            panic!("{message:?}")
        };
        let event = String::from_utf8(event.clone()).unwrap();
        if event.starts_with("lock.") {
            seen.push(event);
        }
    }
    assert_eq!(seen, expected);
}

#[test]
fn info_counters_match_what_happened() {
    let server = Server::start();
    let mut con = server.connect();
    let (a, _) = acquire(&mut con, "a", 60_000, &[]).unwrap();
    assert_eq!(acquire(&mut con, "a", 60_000, &[]), None);
    assert_eq!(acquire(&mut con, "a", 60_000, &[]), None);
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "a", &a, "60000"]), 1);
    let rx = spawn_waiter(&server, "a", 40, &["BLOCK", "0"]);
    wait_for_waiters(&mut con, "a", 1);
    assert_eq!(waiters_total(&mut con), 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "a", &a]), 1);
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    acquire(&mut con, "b", 60_000, &[]).unwrap();
    assert_eq!(acquire(&mut con, "b", 1_000, &["BLOCK", "20"]), None);
    eventually(
        Duration::from_secs(3),
        "lease of the waiter expires",
        || info_field(&mut con, "fencelock", "fencelock_expired").as_deref() == Some("1"),
    );
    let field = |con: &mut Connection, name: &str| {
        info_field(con, "fencelock", &format!("fencelock_{name}")).unwrap()
    };
    assert_eq!(field(&mut con, "acquired"), "3");
    assert_eq!(field(&mut con, "contended"), "2");
    assert_eq!(field(&mut con, "refreshed"), "1");
    assert_eq!(field(&mut con, "released"), "1");
    assert_eq!(field(&mut con, "handoffs"), "1");
    assert_eq!(field(&mut con, "block_timeouts"), "1");
    assert_eq!(field(&mut con, "waiters"), "0");
    assert_eq!(field(&mut con, "held_locks"), "1");
}

fn waiters_total(con: &mut Connection) -> i64 {
    info_field(con, "fencelock", "fencelock_waiters")
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn waiters_are_unblocked_with_an_error_when_their_server_becomes_a_replica() {
    let primary = Server::start();
    let demoted = Server::start();
    let mut con = demoted.connect();
    acquire(&mut con, "k", 60_000, &[]).unwrap();
    let mut waiter = RawClient::connect(demoted.port);
    waiter.send(&[b"LOCK.ACQUIRE", b"k", b"1000", b"BLOCK", b"0"]);
    wait_for_waiters(&mut con, "k", 1);
    demoted.replicate_from(&primary);
    // Redis itself unblocks every blocked client on a role change, as for BLPOP.
    let Reply::Error(error) = waiter.read_reply() else {
        panic!("an error reply")
    };
    assert!(error.starts_with("UNBLOCKED"), "{error}");
    assert_eq!(waiters(&mut con, "k"), 0);
}

/// A lease that ends during `CLIENT PAUSE WRITE` is handed off once the pause ends:
/// not during it, and not as late as the server's next cron tick (Redis 7.0 ends a
/// pause by its cached clock, which only the cron moves between commands).
#[test]
fn a_lease_ending_while_writes_are_paused_is_handed_off_as_the_pause_ends() {
    // One cron tick a second: a handoff that waited for the tick would come up to a
    // second after the pause (half a second in the median), where the server's own
    // timer comes within a few ms. The bound below sits between the two with room for
    // a busy machine, measured on the server's clock (TIME and the grant's fence), so
    // the test's own threads, which load delays most, do not count.
    let server = Server::with_args(&["hz", "1"]);
    let mut con = server.connect();
    let mut lateness = Vec::new();
    for round in 0..5 {
        acquire(&mut con, "k", 100, &[]).unwrap();
        let token = format!("next-{round}");
        let rx = spawn_waiter(&server, "k", 1_000, &["BLOCK", "0", "TOKEN", &token]);
        wait_for_waiters(&mut con, "k", 1);
        // TIME and the pause in one pipeline: run back to back by the server.
        let ((seconds, micros), ()): ((i64, i64), ()) = redis::pipe()
            .cmd("TIME")
            .cmd("CLIENT")
            .arg("PAUSE")
            .arg(400)
            .arg("WRITE")
            .query(&mut con)
            .unwrap();
        let pause_ends_ms = seconds * 1_000 + micros / 1_000 + 400;
        let (grant, _) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("handed off after the pause");
        let (granted, fence) = grant.unwrap();
        assert_eq!(granted, token);
        let late = fence_ms(fence) - pause_ends_ms;
        // Redis starts the pause on its cached clock, which may lag TIME's by a little.
        assert!(
            late >= -10,
            "not during the pause: {} ms before its end",
            -late
        );
        lateness.push(late);
        assert_eq!(int(&mut con, &["DEL", "k"]), 1);
    }
    lateness.sort();
    assert!(
        lateness[lateness.len() / 2] < 150,
        "handoffs after the pause ended, ms: {lateness:?}"
    );
}

/// Seconds of CPU the server's main thread has used.
fn main_thread_cpu(con: &mut Connection) -> f64 {
    ["used_cpu_sys_main_thread", "used_cpu_user_main_thread"]
        .iter()
        .map(|field| {
            info_field(con, "cpu", field)
                .and_then(|value| value.parse::<f64>().ok())
                .expect("INFO cpu main-thread times")
        })
        .sum()
}

/// A server with waiters behind a long lease, waiting with a long `BLOCK` timeout, or
/// with a long shared lease sleeps between events. When a module timer fires, Redis 7.0 re-arms its timer event
/// for the next one with `now + ms * 1000` in an `int`: a timer more than ~35.8 minutes
/// away overflowed that, and the server spun at 100% CPU until the queue emptied.
#[test]
fn an_idle_server_with_long_waits_queued_stays_idle() {
    let server = Server::start();
    let mut con = server.connect();
    let hour_ms = 3_600_000;
    let hour = hour_ms.to_string();
    // A handoff under a lease of an hour, one waiter still queued behind it.
    acquire(&mut con, "lock:long-lease", hour_ms, &["TOKEN", "first"]).expect("granted");
    // One at a time: the first queued is the one the release hands the lock to.
    let granted = spawn_waiter(&server, "lock:long-lease", hour_ms, &["BLOCK", "0"]);
    wait_for_waiters(&mut con, "lock:long-lease", 1);
    let _queued = spawn_waiter(&server, "lock:long-lease", hour_ms, &["BLOCK", "0"]);
    wait_for_waiters(&mut con, "lock:long-lease", 2);
    // A semaphore permit whose own lease ends in an hour.
    acquire(&mut con, "sem:long", hour_ms, &["LIMIT", "2"]).expect("granted");
    // A wait whose BLOCK timeout is an hour away.
    acquire(&mut con, "lock:long-block", hour_ms, &["TOKEN", "other"]).expect("granted");
    let _long_block = spawn_waiter(&server, "lock:long-block", 1_000, &["BLOCK", &hour]);
    eventually(Duration::from_secs(15), "three waiters", || {
        waiters_total(&mut con) == 3
    });
    assert_eq!(
        int(&mut con, &["LOCK.RELEASE", "lock:long-lease", "first"]),
        1
    );
    let (grant, _) = granted
        .recv_timeout(Duration::from_secs(15))
        .expect("handed off");
    assert!(grant.is_some());
    // A module timer that fires (a short BLOCK timeout) makes Redis re-arm its timer
    // event for the long ones.
    let timed_out = spawn_waiter(&server, "lock:long-block", 1_000, &["BLOCK", "100"]);
    let (grant, _) = timed_out
        .recv_timeout(Duration::from_secs(15))
        .expect("timed out");
    assert!(grant.is_none());
    thread::sleep(Duration::from_millis(100));
    let before = main_thread_cpu(&mut con);
    thread::sleep(Duration::from_secs(1));
    let used = main_thread_cpu(&mut con) - before;
    // Spinning takes a whole core (0.86 s here); idle is a few ms, also on a busy machine.
    assert!(used < 0.3, "an idle server used {used:.2} s of CPU in 1 s");
}
