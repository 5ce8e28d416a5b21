//! Deadlock detection: a wait that would close a cycle of owners (sessions, else
//! tokens) is answered `DEADLOCK` at once, names the keys, queues nothing and changes
//! nothing; counted in INFO and announced as `lock.deadlock`. Two sessions crossing
//! over two accounts, a cycle of ten, cycles through shared holders and semaphore
//! permits, through a wait for several keys (past a semaphore waiter too); a long chain
//! without a cycle waits; another thread of the same session holding the key is waited
//! out; the config turns it off.

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

fn deadlock(key: &str, other: &str) -> String {
    format!("DEADLOCK waiting for {key} would wait for {other} held by this owner")
}

/// Sends a blocking acquire of `key` for `session` on a fresh connection, which stays
/// blocked (checked by the waiter count).
fn blocked_acquire(
    server: &Server,
    con: &mut Connection,
    key: &str,
    session: &str,
    extra: &[&str],
) -> RawClient {
    let mut client = RawClient::connect(server.port);
    let before = waiters(con, key);
    let mut argv = vec![
        "LOCK.ACQUIRE",
        key,
        "60000",
        "SESSION",
        session,
        "BLOCK",
        "0",
    ];
    argv.extend_from_slice(extra);
    let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
    client.send(&argv);
    wait_for_waiters(con, key, before + 1);
    client
}

fn error_of(client: &mut RawClient, argv: &[&str]) -> String {
    match client.call_str(argv) {
        Reply::Error(text) => text,
        other => panic!("{argv:?}: expected an error, got {other:?}"),
    }
}

fn deadlocks(con: &mut Connection) -> i64 {
    info_field(con, "fencelock", "fencelock_deadlocks")
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

#[test]
fn two_sessions_crossing_over_two_accounts_the_second_is_refused_at_once() {
    let server = Server::start();
    let mut con = server.connect();
    let mut events =
        keyspace_subscriber(&server, &mut con, &["SUBSCRIBE", "__keyspace@0__:acct:1"]);
    hold_in_session(&mut con, "acct:1", "alice", &[]);
    hold_in_session(&mut con, "acct:2", "bob", &[]);
    let mut alice = blocked_acquire(&server, &mut con, "acct:2", "alice", &[]);
    let mut bob = RawClient::connect(server.port);
    let asked = [
        "LOCK.ACQUIRE",
        "acct:1",
        "60000",
        "SESSION",
        "bob",
        "BLOCK",
        "0",
    ];
    // `BLOCK 0`: a wait would never answer; the refusal is the answer, at once.
    assert_eq!(error_of(&mut bob, &asked), deadlock("acct:1", "acct:2"));
    assert_eq!(waiters(&mut con, "acct:1"), 0, "nothing queued");
    assert_eq!(deadlocks(&mut con), 1);
    let mut event = || match events.read_reply() {
        Reply::Array(Some(parts)) => parts
            .last()
            .and_then(Reply::bulk)
            .map(|name| String::from_utf8_lossy(name).into_owned()),
        _ => None,
    };
    assert_eq!(event().as_deref(), Some("lock.acquired"));
    assert_eq!(event().as_deref(), Some("lock.deadlock"));
    // Bob gives up his account: alice's wait goes on and is served.
    assert_eq!(int(&mut con, &["LOCK.CLOSE", "bob"]), 1);
    assert!(alice.read_reply().grant().is_some());
}

#[test]
fn a_cycle_of_ten_owners_over_ten_keys_is_refused_at_its_last_link() {
    let server = Server::start();
    let mut con = server.connect();
    for i in 0..10 {
        hold_in_session(&mut con, &format!("k{i}"), &format!("s{i}"), &[]);
    }
    let mut blocked = Vec::new();
    for i in 0..9 {
        let next = format!("k{}", i + 1);
        blocked.push(blocked_acquire(
            &server,
            &mut con,
            &next,
            &format!("s{i}"),
            &[],
        ));
    }
    let mut last = RawClient::connect(server.port);
    let asked = ["LOCK.ACQUIRE", "k0", "60000", "SESSION", "s9", "BLOCK", "0"];
    assert_eq!(error_of(&mut last, &asked), deadlock("k0", "k9"));
    // A chain that does not come back waits: s9's wait for a key held by nobody in it.
    hold_in_session(&mut con, "outside", "x", &[]);
    let _chain_end = blocked_acquire(&server, &mut con, "outside", "s9", &[]);
    assert_eq!(deadlocks(&mut con), 1);
}

#[test]
fn cycles_through_shared_holders_and_semaphore_permits_are_refused() {
    let server = Server::start();
    let mut con = server.connect();
    // A reader that waits for a writer that waits for that reader.
    hold_in_session(&mut con, "doc", "reader", &["SHARED"]);
    hold_in_session(&mut con, "index", "writer", &[]);
    let _reader = blocked_acquire(&server, &mut con, "index", "reader", &[]);
    let mut writer = RawClient::connect(server.port);
    let asked = [
        "LOCK.ACQUIRE",
        "doc",
        "60000",
        "SESSION",
        "writer",
        "BLOCK",
        "0",
    ];
    assert_eq!(error_of(&mut writer, &asked), deadlock("doc", "index"));
    // A full semaphore: its permit holder waits for the asker.
    hold_in_session(&mut con, "pool", "p1", &["LIMIT", "2"]);
    hold_in_session(&mut con, "pool", "p2", &["LIMIT", "2"]);
    hold_in_session(&mut con, "job", "q", &[]);
    let _p1 = blocked_acquire(&server, &mut con, "job", "p1", &[]);
    let mut q = RawClient::connect(server.port);
    let asked = [
        "LOCK.ACQUIRE",
        "pool",
        "60000",
        "SESSION",
        "q",
        "LIMIT",
        "2",
        "BLOCK",
        "0",
    ];
    assert_eq!(error_of(&mut q, &asked), deadlock("pool", "job"));
    // With a permit free, the same request is granted: no wait, no cycle.
    int(&mut con, &["LOCK.CLOSE", "p2"]);
    assert!(acquire(
        &mut con,
        "pool",
        60_000,
        &["SESSION", "q", "LIMIT", "2", "BLOCK", "0"]
    )
    .is_some());
}

#[test]
fn a_shared_reader_does_not_wait_for_readers_queued_with_it() {
    let server = Server::start();
    let mut con = server.connect();
    // A writer holds; a reader of session r queues, then r's other key is asked for by
    // a reader queued behind it. Readers are served together: no cycle.
    hold_in_session(&mut con, "doc", "w", &[]);
    hold_in_session(&mut con, "note", "r", &[]);
    let _r = blocked_acquire(&server, &mut con, "doc", "r2", &["SHARED"]);
    let _other = blocked_acquire(&server, &mut con, "note", "r3", &[]);
    let _r3 = blocked_acquire(&server, &mut con, "doc", "r3", &["SHARED"]);
    assert_eq!(deadlocks(&mut con), 0);
}

#[test]
fn a_wait_for_several_keys_is_checked_and_waited_for() {
    let server = Server::start();
    let mut con = server.connect();
    let mut client = RawClient::connect(server.port);
    hold_in_session(&mut con, "a", "s1", &[]);
    hold_in_session(&mut con, "c", "s2", &[]);
    // s2 waits for a (held by s1) ...
    let _s2 = blocked_acquire(&server, &mut con, "a", "s2", &[]);
    // ... so s1 may not wait for b and c at once: c is held by s2.
    let asked = [
        "LOCK.ACQUIREALL",
        "2",
        "b",
        "c",
        "60000",
        "SESSION",
        "s1",
        "BLOCK",
        "0",
    ];
    assert_eq!(error_of(&mut client, &asked), deadlock("c", "a"));
    assert_eq!(
        int(&mut con, &["EXISTS", "b"]),
        0,
        "nothing granted, b stays free"
    );
    assert_eq!(waiters(&mut con, "b"), 0);
    // And a single-key waiter behind a wait for several keys waits for its owner.
    let mut multi = RawClient::connect(server.port);
    multi.send(
        &[
            "LOCK.ACQUIREALL",
            "2",
            "x",
            "a",
            "60000",
            "SESSION",
            "s3",
            "BLOCK",
            "0",
        ]
        .map(str::as_bytes),
    );
    wait_for_waiters(&mut con, "x", 1);
    hold_in_session(&mut con, "y", "s3", &[]);
    let mut s4 = RawClient::connect(server.port);
    let waits_behind = ["LOCK.ACQUIRE", "x", "60000", "SESSION", "s4", "BLOCK", "0"];
    s4.send(&waits_behind.map(str::as_bytes));
    wait_for_waiters(&mut con, "x", 2);
    hold_in_session(&mut con, "z", "s4", &[]);
    // s3 asking for z (held by s4, who waits behind s3's wait) closes a cycle.
    let mut s3 = RawClient::connect(server.port);
    let asked = ["LOCK.ACQUIRE", "z", "60000", "SESSION", "s3", "BLOCK", "0"];
    assert_eq!(error_of(&mut s3, &asked), deadlock("z", "x"));
}

#[test]
fn the_same_session_waiting_for_a_key_it_holds_waits_it_out() {
    let server = Server::start();
    let mut con = server.connect();
    let token = hold_in_session(&mut con, "stock", "worker", &[]);
    let mut second_thread = blocked_acquire(&server, &mut con, "stock", "worker", &[]);
    assert_eq!(
        second_thread.try_read_reply(Duration::from_millis(100)),
        None
    );
    int(&mut con, &["LOCK.RELEASE", "stock", &token]);
    assert!(second_thread.read_reply().grant().is_some());
    assert_eq!(deadlocks(&mut con), 0);
}

#[test]
fn tokens_are_owners_when_there_is_no_session() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "a", 60_000, &["TOKEN", "t1"]).unwrap();
    acquire(&mut con, "b", 60_000, &["TOKEN", "t2"]).unwrap();
    let mut t1 = RawClient::connect(server.port);
    t1.send(&["LOCK.ACQUIRE", "b", "60000", "TOKEN", "t1", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "b", 1);
    let mut t2 = RawClient::connect(server.port);
    let asked = ["LOCK.ACQUIRE", "a", "60000", "TOKEN", "t2", "BLOCK", "0"];
    assert_eq!(error_of(&mut t2, &asked), deadlock("a", "b"));
    // Without TOKEN or SESSION a waiter owns nothing anybody could wait for.
    let mut anonymous = RawClient::connect(server.port);
    anonymous.send(&["LOCK.ACQUIRE", "a", "60000", "BLOCK", "0"].map(str::as_bytes));
    wait_for_waiters(&mut con, "a", 1);
}

#[test]
fn with_detection_off_the_cycle_waits_until_a_timeout_breaks_it() {
    let server = Server::start();
    let mut con = server.connect();
    cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.deadlock-detection")
        .arg("no")
        .exec(&mut con)
        .unwrap();
    hold_in_session(&mut con, "a", "s1", &[]);
    hold_in_session(&mut con, "b", "s2", &[]);
    let _s1 = blocked_acquire(&server, &mut con, "b", "s1", &[]);
    let mut s2 = RawClient::connect(server.port);
    s2.send(
        &[
            "LOCK.ACQUIRE",
            "a",
            "60000",
            "SESSION",
            "s2",
            "BLOCK",
            "200",
        ]
        .map(str::as_bytes),
    );
    assert!(s2.read_reply().is_nil(), "waited, then timed out");
    assert_eq!(deadlocks(&mut con), 0);
}

/// H holds `k`, OS holds `z`; OM waits for `k` and `free1` at once, shared; OS waits
/// for `k` shared behind it; then `z_asker` waits for `z`. `free1_holder`: who holds
/// `free1` from the start. The outcome of the last wait.
fn shared_waits_behind_a_wait_for_several_keys(
    free1_holder: Option<&str>,
    z_asker: &str,
) -> (Server, String) {
    let server = Server::start();
    let mut con = server.connect();
    hold_in_session(&mut con, "k", "H", &[]);
    hold_in_session(&mut con, "z", "OS", &[]);
    if let Some(owner) = free1_holder {
        hold_in_session(&mut con, "free1", owner, &[]);
    }
    let mut om = RawClient::connect(server.port);
    om.send(
        &[
            "LOCK.ACQUIREALL",
            "2",
            "k",
            "free1",
            "60000",
            "SESSION",
            "OM",
            "SHARED",
            "BLOCK",
            "0",
        ]
        .map(str::as_bytes),
    );
    wait_for_waiters(&mut con, "k", 1);
    let _os = blocked_acquire(&server, &mut con, "k", "OS", &["SHARED"]);
    let mut om2 = RawClient::connect(server.port);
    let asked = [
        "LOCK.ACQUIRE",
        "z",
        "60000",
        "SESSION",
        z_asker,
        "BLOCK",
        "0",
    ];
    om2.send(&asked.map(str::as_bytes));
    let outcome = match om2.try_read_reply(Duration::from_millis(300)) {
        Some(Reply::Error(text)) => text,
        Some(other) => format!("{other:?}"),
        None => "waits".to_string(),
    };
    drop((om, om2));
    (server, outcome)
}

#[test]
fn a_shared_waiter_behind_a_shared_wait_for_several_keys_waits_only_for_the_holders() {
    // OS waits for what OM's wait waits for (H), not for OM: when H goes, OM and OS
    // are granted k in one step. So OM may wait for z.
    let (server, outcome) = shared_waits_behind_a_wait_for_several_keys(None, "OM");
    assert_eq!(outcome, "waits");
    assert_eq!(deadlocks(&mut server.connect()), 0);
}

#[test]
fn the_same_waits_close_a_cycle_when_the_asker_holds_the_other_key() {
    // X holds free1: OM's wait waits for X, and OS through it. X asking for z (held
    // by OS) would wait for itself.
    let (_server, outcome) = shared_waits_behind_a_wait_for_several_keys(Some("X"), "X");
    assert_eq!(outcome, deadlock("z", "free1"));
}

/// Sends `argv` on a fresh connection: whether it was refused at once (the error), or
/// waits (then the connection, still waiting).
fn ask(server: &Server, argv: &[&str]) -> Result<RawClient, String> {
    let mut client = RawClient::connect(server.port);
    let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
    client.send(&argv);
    match client.try_read_reply(Duration::from_millis(300)) {
        None => Ok(client),
        Some(Reply::Error(text)) => Err(text),
        Some(other) => panic!("{argv:?}: neither waiting nor refused: {other:?}"),
    }
}

/// A second, blocking ask of session A for x, the key it holds.
const A_ASKS_FOR_X: [&str; 7] = ["LOCK.ACQUIRE", "x", "5000", "SESSION", "A", "BLOCK", "0"];

/// Session B waiting for x and z together, on a connection of its own.
fn b_waits_for_x_and_z(server: &Server) -> RawClient {
    let all = [
        "LOCK.ACQUIREALL",
        "2",
        "x",
        "z",
        "5000",
        "SESSION",
        "B",
        "BLOCK",
        "0",
    ];
    ask(server, &all).expect("B waits")
}

fn token_of(client: &mut RawClient) -> String {
    let reply = client.read_reply();
    let (token, _) = reply.grant().expect("granted");
    String::from_utf8_lossy(token).into_owned()
}

#[test]
fn a_session_waits_behind_another_sessions_two_waits_for_a_key_it_holds() {
    // A holds x; two threads of B wait for x; a second thread of A asks for x: the
    // holding thread waits for nothing, so this is no cycle. Granted in FIFO order.
    let server = Server::start();
    let mut con = server.connect();
    let a1 = hold_in_session(&mut con, "x", "A", &[]);
    let mut b1 = blocked_acquire(&server, &mut con, "x", "B", &[]);
    let mut b2 = blocked_acquire(&server, &mut con, "x", "B", &[]);
    let mut a2 = ask(&server, &A_ASKS_FOR_X).expect("waits");
    assert_eq!(waiters(&mut con, "x"), 3);
    int(&mut con, &["LOCK.RELEASE", "x", &a1]);
    let b1_token = token_of(&mut b1);
    assert_eq!(a2.try_read_reply(Duration::from_millis(100)), None);
    int(&mut con, &["LOCK.RELEASE", "x", &b1_token]);
    let b2_token = token_of(&mut b2);
    assert_eq!(a2.try_read_reply(Duration::from_millis(100)), None);
    int(&mut con, &["LOCK.RELEASE", "x", &b2_token]);
    token_of(&mut a2);
    assert_eq!(deadlocks(&mut con), 0);
}

#[test]
fn other_sessions_waits_for_a_key_its_owner_holds_are_waited_out_in_every_mode() {
    // B's waits in x, in exclusive, shared or semaphore modes, of two threads, for
    // several keys at once, and a third session's as well: each leads back to A only
    // through A's holding of x, the key A asks for again.
    let cases: [(&[&str], &[&str]); 4] = [
        (&["SHARED"], &["SHARED"]),
        (&["LIMIT", "2"], &["LIMIT", "2"]),
        (&[], &["SHARED"]),
        (&[], &["LIMIT", "2"]),
    ];
    for (b_mode, a_mode) in cases {
        let server = Server::start();
        let mut con = server.connect();
        hold_in_session(&mut con, "x", "A", &[]);
        let _b1 = blocked_acquire(&server, &mut con, "x", "B", b_mode);
        let _b2 = blocked_acquire(&server, &mut con, "x", "B", b_mode);
        let mut asked = A_ASKS_FOR_X.to_vec();
        asked.extend_from_slice(a_mode);
        assert!(ask(&server, &asked).is_ok(), "{b_mode:?} then {a_mode:?}");
        assert_eq!(deadlocks(&mut con), 0);
    }
    // B waits for x and z together (z free), C twice for x.
    let server = Server::start();
    let mut con = server.connect();
    hold_in_session(&mut con, "x", "A", &[]);
    let _b = b_waits_for_x_and_z(&server);
    let _c1 = blocked_acquire(&server, &mut con, "x", "C", &[]);
    let _c2 = blocked_acquire(&server, &mut con, "x", "C", &[]);
    assert!(ask(&server, &A_ASKS_FOR_X).is_ok());
    assert_eq!(deadlocks(&mut con), 0);
}

#[test]
fn another_sessions_wait_for_a_key_held_elsewhere_by_the_asker_still_closes_a_cycle() {
    // B waits for x and z together, z held by A: B waits for A in z, which A's new wait
    // for x does not ask for. A cycle.
    let server = Server::start();
    let mut con = server.connect();
    hold_in_session(&mut con, "x", "A", &[]);
    hold_in_session(&mut con, "z", "A", &[]);
    let _b = b_waits_for_x_and_z(&server);
    let _b2 = blocked_acquire(&server, &mut con, "x", "B", &[]);
    assert_eq!(ask(&server, &A_ASKS_FOR_X).err(), Some(deadlock("x", "z")));
    assert_eq!(deadlocks(&mut con), 1);
}

/// A holds `z` shared and E waits for it exclusively; A waits shared for `k` and `z`
/// together (behind E); C waits for `w` (held by W), for `k` in the mode `between` (if
/// any), then shared for `k` behind both; then A asks for `k` exclusively. The ask's connection, how many wait
/// for `k` before it, and the other waits' connections (kept while the test looks).
fn a_asks_past_a_shared_wait_for_several_keys(
    server: &Server,
    con: &mut Connection,
    between: Option<&[&str]>,
) -> (RawClient, i64, Vec<RawClient>) {
    hold_in_session(con, "z", "A", &["SHARED"]);
    let e = blocked_acquire(server, con, "z", "E", &[]);
    let mut all = RawClient::connect(server.port);
    all.send(
        &[
            "LOCK.ACQUIREALL",
            "2",
            "k",
            "z",
            "60000",
            "SESSION",
            "A",
            "SHARED",
            "BLOCK",
            "0",
        ]
        .map(str::as_bytes),
    );
    wait_for_waiters(con, "k", 1);
    hold_in_session(con, "w", "W", &[]);
    let mut kept = vec![e, all, blocked_acquire(server, con, "w", "C", &[])];
    if let Some(mode) = between {
        kept.push(blocked_acquire(server, con, "k", "C", mode));
    }
    kept.push(blocked_acquire(server, con, "k", "C", &["SHARED"]));
    let queued = waiters(con, "k");
    let mut ask = RawClient::connect(server.port);
    ask.send(
        &[
            "LOCK.ACQUIRE",
            "k",
            "60000",
            "SESSION",
            "A",
            "BLOCK",
            "5000",
        ]
        .map(str::as_bytes),
    );
    (ask, queued, kept)
}

#[test]
fn a_shared_waiter_past_a_semaphore_waiter_still_waits_for_what_a_shared_wait_for_several_keys_does(
) {
    // C's shared wait is granted in the same step as A's wait for k and z (a semaphore
    // wait between them is refused once that wait holds k): it waits for what A's wait
    // waits for in z, E, which waits for A's holding of z. A cycle closing in z, as
    // with nobody between them. (C waits elsewhere too: a shared wait whose owner waits
    // for nothing else is followed only within k, where A's own wait is waited out.)
    for between in [None, Some(&["LIMIT", "2"][..])] {
        let server = Server::start();
        let mut con = server.connect();
        let (mut ask, _, _kept) =
            a_asks_past_a_shared_wait_for_several_keys(&server, &mut con, between);
        match ask.read_reply() {
            Reply::Error(text) => assert_eq!(text, deadlock("k", "z"), "{between:?}"),
            other => panic!("{between:?}: expected DEADLOCK, got {other:?}"),
        }
        assert_eq!(deadlocks(&mut con), 1);
    }
    // An exclusive waiter between them is served only after A's wait for k and z has
    // held k and let it go: C waits for A in k, the key A asks for, which is waited out.
    let server = Server::start();
    let mut con = server.connect();
    let (_ask, queued, _kept) =
        a_asks_past_a_shared_wait_for_several_keys(&server, &mut con, Some(&[]));
    wait_for_waiters(&mut con, "k", queued + 1);
    assert_eq!(deadlocks(&mut con), 0);
}
