//! The effect forms on shared locks: `LOCK.APPLY` adds one holder with the given fence
//! and deadline (and refuses a fence another holder has), `LOCK.DROP` removes one, and
//! holders written by `LOCK.APPLY` are announced at their own lease end.

use std::time::{Duration, Instant};

use testkit::resp::{err, RawClient, Reply};
use testkit::*;

use super::{assert_info, held_info, hold, holders, next_events};

#[test]
fn lock_apply_and_lock_drop_add_and_remove_one_holder() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let deadline = (now_ms() + 60_000).to_string();
    for (token, fence) in [("t1", "9000000000000001"), ("t2", "9000000000000002")] {
        let reply = raw.call_str(&[
            "LOCK.APPLY",
            "sem",
            token,
            fence,
            "PXAT",
            &deadline,
            "LIMIT",
            "2",
        ]);
        assert!(!matches!(reply, Reply::Error(_)), "{reply:?}");
    }
    assert!(!matches!(
        raw.call_str(&[
            "LOCK.APPLY",
            "rw",
            "r",
            "9000000000000003",
            "PXAT",
            &deadline,
            "SHARED"
        ]),
        Reply::Error(_)
    ));
    assert_eq!(fence_of(&mut con, "sem", "t1"), Some(9_000_000_000_000_001));
    assert_eq!(fence(&mut con, "sem"), Some(9_000_000_000_000_002));
    assert_info(
        &mut raw,
        "sem",
        &held_info(
            9_000_000_000_000_002,
            60_000,
            "semaphore",
            2,
            Some(2),
            (0, 0),
        ),
    );
    assert_info(
        &mut raw,
        "rw",
        &held_info(9_000_000_000_000_003, 60_000, "shared", 1, None, (0, 0)),
    );
    assert_eq!(expire_time(&mut con, "sem").to_string(), deadline);
    assert_eq!(int(&mut con, &["LOCK.DROP", "sem", "t1"]), 1);
    assert_eq!(int(&mut con, &["LOCK.DROP", "sem", "t1"]), 0);
    assert_eq!(holders(&mut con, "sem"), 1);
    assert_eq!(int(&mut con, &["LOCK.DROP", "sem", "t2"]), 1);
    assert_eq!(
        int(&mut con, &["EXISTS", "sem"]),
        0,
        "the last one leaves no key"
    );
    // The fence clock was raised past the applied fences.
    let (_, next) = hold(&mut con, "sem", 1_000, &["LIMIT", "2"]);
    assert!(next > 9_000_000_000_000_003);
}

#[test]
fn holders_written_by_lock_apply_are_announced_at_their_own_lease_end() {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber =
        keyspace_subscriber(&server, &mut con, &["PSUBSCRIBE", "__keyspace@0__:lock:*"]);
    let now = now_ms();
    for (token, fence, lease) in [("a", "1", 300), ("b", "2", 3_000)] {
        let deadline = (now + lease).to_string();
        let argv = [
            "LOCK.APPLY",
            "lock:applied",
            token,
            fence,
            "PXAT",
            &deadline,
            "SHARED",
        ];
        let _: () = cmd(argv[0]).arg(&argv[1..]).query(&mut con).unwrap();
    }
    let started = Instant::now();
    let events = next_events(&mut subscriber, 1);
    assert_eq!(events[0].1, "lock.expired");
    assert!(
        started.elapsed() < Duration::from_millis(1_000),
        "a's end announced after {:?}",
        started.elapsed()
    );
    assert_eq!(holders(&mut con, "lock:applied"), 1);
}

/// Every grant has its own fence, so two holders of one key never share one: an
/// explicit `LOCK.APPLY` that would make them is refused and changes nothing.
#[test]
fn lock_apply_refuses_a_fence_another_holder_has() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    let deadline = (now_ms() + 60_000).to_string();
    let apply = |raw: &mut RawClient, token: &str, fence: &str| {
        raw.call_str(&[
            "LOCK.APPLY",
            "rw",
            token,
            fence,
            "PXAT",
            &deadline,
            "SHARED",
        ])
    };
    assert!(apply(&mut raw, "a", "5").is_ok());
    let before = raw.call_str(&["DEBUG", "DIGEST-VALUE", "rw"]);
    assert_eq!(
        apply(&mut raw, "b", "5"),
        err("ERR another holder of the lock has this fence")
    );
    assert_eq!(raw.call_str(&["DEBUG", "DIGEST-VALUE", "rw"]), before);
    // The holder itself may be re-applied, with its own fence or the one it had.
    assert!(apply(&mut raw, "a", "5").is_ok());
    assert!(apply(&mut raw, "b", "6").is_ok());
}
