//! What a client does with the replies that are not grants: `DEADLOCK` (release what the
//! owner holds, then try again: waiting again cannot help), `WRONGSESSION` (a token
//! reused by another session: a bug, never retried as is), `MOVED`/`ASK` (follow them:
//! the lock key decides the node) and `TRYAGAIN` (wait again, same token, routed anew).

use testkit::resp::{RawClient, Reply};
use testkit::*;

use super::{random_token, send};
use crate::cluster::{give_slot_with_its_keys_left_behind, key_per_node, Cluster, SlotMove};

fn error_text(reply: &Reply) -> &str {
    match reply {
        Reply::Error(text) => text,
        other => panic!("not an error: {other:?}"),
    }
}

/// Owner A (a session) holds `lock:x` and waits for `lock:y`; owner B holds `lock:y` and
/// asks to wait for `lock:x`: refused at once with `DEADLOCK`, and asking again is
/// refused again, for as long as B holds `lock:y`. Releasing `lock:y` first (the kept
/// way) lets A through, and B's new wait for `lock:x` is served when A is done.
#[test]
fn a_deadlock_is_refused_until_the_owner_releases_what_it_holds() {
    let server = Server::start();
    let mut con = server.connect();
    let (a, b) = (random_token(), random_token());
    let a_x = hold_in_session(&mut con, "lock:x", &a, &["TOKEN", &random_token()]);
    let b_y = hold_in_session(&mut con, "lock:y", &b, &["TOKEN", &random_token()]);
    let mut a_waits = RawClient::connect(server.port);
    send(
        &mut a_waits,
        &[
            "LOCK.ACQUIRE",
            "lock:y",
            "30000",
            "SESSION",
            &a,
            "TOKEN",
            &random_token(),
            "BLOCK",
            "20000",
        ],
    );
    wait_for_waiters(&mut con, "lock:y", 1);

    let mut b_con = RawClient::connect(server.port);
    let b_x = random_token();
    let wait_for_x = [
        "LOCK.ACQUIRE",
        "lock:x",
        "30000",
        "SESSION",
        &b,
        "TOKEN",
        &b_x,
        "BLOCK",
        "20000",
    ];
    for attempt in ["first", "again"] {
        assert_eq!(
            error_text(&b_con.call_str(&wait_for_x)),
            "DEADLOCK waiting for lock:x would wait for lock:y held by this owner",
            "{attempt}"
        );
    }

    assert_eq!(int(&mut con, &["LOCK.RELEASE", "lock:y", &b_y]), 1);
    assert!(grant_of(&a_waits.read_reply()).is_some(), "A goes on");
    send(&mut b_con, &wait_for_x);
    wait_for_waiters(&mut con, "lock:x", 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "lock:x", &a_x]), 1);
    assert_eq!(grant_of(&b_con.read_reply()).map(|(t, _)| t), Some(b_x));
}

/// A token that holds a lock in one session, sent again with another (two lock managers
/// sharing a token source, a token reused across requests): `WRONGSESSION`, nothing
/// renewed. A fresh token per acquire meets the holding as any other client does: busy.
#[test]
fn a_token_reused_by_another_session_is_refused() {
    let server = Server::start();
    let mut con = server.connect();
    let token = random_token();
    hold_in_session(&mut con, "lock:cart", &random_token(), &["TOKEN", &token]);
    let reused: redis::RedisResult<Value> = cmd("LOCK.ACQUIRE")
        .arg("lock:cart")
        .arg(30_000)
        .arg("SESSION")
        .arg(random_token())
        .arg("TOKEN")
        .arg(&token)
        .query(&mut con);
    let error = reused.expect_err("refused");
    assert_eq!(error.code(), Some("WRONGSESSION"));
    assert_eq!(
        error.detail(),
        Some("this token holds lock:cart in another session")
    );
    let fresh = acquire(
        &mut con,
        "lock:cart",
        30_000,
        &["SESSION", &random_token(), "TOKEN", &random_token()],
    );
    assert_eq!(fresh, None, "busy, as for any other client");
}

/// `MOVED`: a node that does not serve the lock key's slot answers every `LOCK.*`
/// command on it with the slot's owner, changing nothing; sent there, it is granted.
/// `ASK`: while the slot migrates, a key the source no longer has is answered `ASK`; the
/// target grants it only after `ASKING` (without it, `MOVED` back to the source).
#[test]
fn moved_and_ask_name_the_node_that_grants_the_lock() {
    let cluster = Cluster::start();
    let key = key_per_node(&cluster, "lock:routed")[0].clone();
    let mut raw: Vec<RawClient> = cluster
        .nodes
        .iter()
        .map(|node| RawClient::connect(node.port))
        .collect();
    let slot = slot_of(&mut cluster.nodes[0].connect(), &key);

    let wrong = raw[1].call_str(&["LOCK.ACQUIRE", &key, "30000", "BLOCK", "1000"]);
    assert_eq!(
        error_text(&wrong),
        format!("MOVED {slot} 127.0.0.1:{}", cluster.nodes[0].port)
    );
    assert_eq!(int(&mut cluster.nodes[1].connect(), &["DBSIZE"]), 0);
    let (token, _) = grant_of(&raw[0].call_str(&["LOCK.ACQUIRE", &key, "30000"])).expect("granted");
    assert_eq!(
        int(
            &mut cluster.nodes[0].connect(),
            &["LOCK.RELEASE", &key, &token]
        ),
        1
    );

    let _moving = SlotMove::begin(&cluster.nodes[0], &cluster.nodes[1], slot);
    let asked = raw[0].call_str(&["LOCK.ACQUIRE", &key, "30000"]);
    assert_eq!(
        error_text(&asked),
        format!("ASK {slot} 127.0.0.1:{}", cluster.nodes[1].port)
    );
    let unasked = raw[1].call_str(&["LOCK.ACQUIRE", &key, "30000"]);
    assert!(error_text(&unasked).starts_with("MOVED "), "{unasked:?}");
    raw[1].send_pipeline(&[&["ASKING"], &["LOCK.ACQUIRE", &key, "30000"]]);
    assert!(raw[1].read_reply().is_ok());
    assert!(
        grant_of(&raw[1].read_reply()).is_some(),
        "granted on the target"
    );
}

/// `TRYAGAIN`: a wait whose key's slot was given to another node is answered `TRYAGAIN`
/// (never handed the lock there). The same wait sent again, with the same token, through
/// a cluster client that routes by the key, follows `MOVED` to the new owner and is
/// granted there.
#[test]
fn a_wait_answered_tryagain_is_granted_when_sent_again() {
    let cluster = Cluster::start();
    let key = key_per_node(&cluster, "lock:tryagain")[0].clone();
    let (old_owner, new_owner) = (&cluster.nodes[0], &cluster.nodes[1]);
    let mut old = old_owner.connect();
    hold(&mut old, &key, 60_000, &[]);
    let token = random_token();
    let mut waiter = RawClient::connect(old_owner.port);
    send(
        &mut waiter,
        &[
            "LOCK.ACQUIRE",
            &key,
            "30000",
            "TOKEN",
            &token,
            "BLOCK",
            "20000",
        ],
    );
    wait_for_waiters(&mut old, &key, 1);

    give_slot_with_its_keys_left_behind(slot_of(&mut old, &key), new_owner);
    let mut new = new_owner.connect();
    assert!(error_text(&waiter.read_reply()).starts_with("TRYAGAIN"));

    let mut client = cluster.client();
    let again: Option<(String, i64)> = cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg(30_000)
        .arg("TOKEN")
        .arg(&token)
        .arg("BLOCK")
        .arg(20_000)
        .query(&mut client)
        .expect("sent again");
    assert_eq!(again.map(|(t, _)| t), Some(token.clone()));
    assert!(
        fence_of(&mut new, &key, &token).is_some(),
        "held on the new owner"
    );
}
