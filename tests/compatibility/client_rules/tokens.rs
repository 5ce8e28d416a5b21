//! Tokens: a random one made for each acquire (never a business id), always sent with
//! `TOKEN`, so that an acquire sent again (a reconnect that re-sends what was in flight,
//! a retry after a lost reply) and a wait sent again after a client-side timeout are the
//! same request, answered with the same grant.

use testkit::resp::RawClient;
use testkit::*;

use super::{random_token, send};

/// One submission of the order's checkout: it charges when it gets the lock.
fn submit(con: &mut Connection, token: &str) -> bool {
    let granted = acquire(con, "lock:order-42", 30_000, &["TOKEN", token]).is_some();
    if granted {
        let _: i64 = cmd("INCR").arg("charges:order-42").query(con).unwrap();
    }
    granted
}

/// A double click submits order 42 twice. Broken: the order's idempotency key as the
/// token: the second submission is the first's same-token retry, so both are granted
/// (one grant, one fence) and the order is charged twice. Kept: a random token per
/// acquire: the second finds the lock busy and the order is charged once.
#[test]
fn a_business_id_as_token_grants_both_submissions_a_random_token_one() {
    let server = Server::start();
    let (mut first, mut second) = (server.connect(), server.connect());

    assert!(submit(&mut first, "order-42"));
    assert!(
        submit(&mut second, "order-42"),
        "the second submission is granted too"
    );
    assert_eq!(int(&mut first, &["GET", "charges:order-42"]), 2);

    let _: i64 = cmd("DEL")
        .arg("lock:order-42")
        .arg("charges:order-42")
        .query(&mut first)
        .unwrap();
    assert!(submit(&mut first, &random_token()));
    assert!(!submit(&mut second, &random_token()), "the second is busy");
    assert_eq!(int(&mut first, &["GET", "charges:order-42"]), 1);
}

/// The server granted an acquire whose reply the client never read (its connection
/// dropped), and the client sends it again, as ioredis re-sends in-flight commands after
/// a reconnect. Broken: without `TOKEN` the re-sent acquire is a new request: busy (nil)
/// while its own lost grant holds the key for the whole ttl. Kept: with `TOKEN` it is the
/// same request: the same grant, with the original fence.
#[test]
fn a_resent_acquire_is_busy_without_token_and_the_same_grant_with_one() {
    let server = Server::start();
    let mut con = server.connect();
    let token = random_token();
    for (key, named) in [("lock:no-token", false), ("lock:token", true)] {
        let mut lost = RawClient::connect(server.port);
        let mut argv = vec!["LOCK.ACQUIRE", key, "30000"];
        if named {
            argv.extend(["TOKEN", token.as_str()]);
        }
        send(&mut lost, &argv);
        wait_for_lock(&mut con, key);
        let granted = fence(&mut con, key).expect("granted");
        drop(lost);

        let again = acquire(&mut con, key, 30_000, &argv[3..]);
        if named {
            assert_eq!(again, Some((token.clone(), granted)), "the same grant");
        } else {
            assert_eq!(again, None, "busy: its own lost grant holds {key}");
            assert!(int(&mut con, &["PTTL", key]) > 0);
        }
    }
}

/// Until `key` is held (a grant sent on another connection took effect).
fn wait_for_lock(con: &mut Connection, key: &str) {
    eventually(std::time::Duration::from_secs(10), key, || {
        int(con, &["EXISTS", key]) == 1
    });
}

/// A client gives up on a wait by its own timeout, keeping its connection, and waits
/// again on a new one. Kept: the re-wait names the same `TOKEN`: when the holder
/// releases, the abandoned wait's grant is the re-wait's, answered to it. Broken: a new
/// token: the abandoned wait is granted first, to nobody, and the re-wait stays queued
/// behind that orphaned grant.
#[test]
fn a_rewait_after_a_client_timeout_gets_the_grant_only_with_the_same_token() {
    let server = Server::start();
    let mut con = server.connect();
    for same_token in [true, false] {
        let key = format!("lock:rewait-{same_token}");
        let (holder, _) = hold(&mut con, &key, 30_000, &["TOKEN", &random_token()]);
        let first = random_token();
        let mut abandoned = RawClient::connect(server.port);
        send(
            &mut abandoned,
            &[
                "LOCK.ACQUIRE",
                &key,
                "30000",
                "TOKEN",
                &first,
                "BLOCK",
                "20000",
            ],
        );
        wait_for_waiters(&mut con, &key, 1);
        let second = if same_token {
            first.clone()
        } else {
            random_token()
        };
        let mut rewait = RawClient::connect(server.port);
        send(
            &mut rewait,
            &[
                "LOCK.ACQUIRE",
                &key,
                "30000",
                "TOKEN",
                &second,
                "BLOCK",
                "20000",
            ],
        );
        wait_for_waiters(&mut con, &key, 2);

        assert_eq!(int(&mut con, &["LOCK.RELEASE", &key, &holder]), 1);
        let granted = fence_of(&mut con, &key, &first).expect("the first wait's token holds it");
        if same_token {
            assert_eq!(
                grant_of(&rewait.read_reply()),
                Some((first.clone(), granted)),
                "the re-wait is answered with the grant"
            );
        } else {
            assert_eq!(waiters(&mut con, &key), 1, "the re-wait still waits");
            assert!(
                int(&mut con, &["PTTL", &key]) > 0,
                "held by a grant nobody reads"
            );
        }
        drop(abandoned);
    }
}
