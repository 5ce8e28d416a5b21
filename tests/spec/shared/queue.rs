//! The FIFO queue of shared waiters: `BLOCK` never blocks inside `MULTI` or scripts;
//! `CLIENT UNBLOCK` ends a shared wait; a queued waiter whose mode no longer matches gets
//! `WRONGMODE` at its turn; `fencelock.max-waiters` counts shared waiters; and waiters
//! behind one that stops waiting (timeout, `CLIENT UNBLOCK`, disconnect) are granted at
//! once if they fit.

use std::time::Duration;

use testkit::resp::{err, RawClient, Reply};
use testkit::*;

use super::{acquire_raw, hold, holders, release, Waiter};

/// A `LOCK.ACQUIRE` reply: `[token, fence]` or nil.
type Grant = Option<(String, i64)>;

#[test]
fn block_does_not_block_shared_acquires_inside_multi_or_scripts() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "rw", 60_000, &["TOKEN", "x"]);
    hold(&mut con, "sem", 60_000, &["TOKEN", "s", "LIMIT", "1"]);
    let (rw, sem, free): (Grant, Grant, Grant) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("rw")
        .arg(1000)
        .arg("SHARED")
        .arg("BLOCK")
        .arg(0)
        .cmd("LOCK.ACQUIRE")
        .arg("sem")
        .arg(1000)
        .arg("LIMIT")
        .arg(1)
        .arg("BLOCK")
        .arg(0)
        .cmd("LOCK.ACQUIRE")
        .arg("free")
        .arg(1000)
        .arg("LIMIT")
        .arg(2)
        .arg("BLOCK")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!((rw, sem), (None, None), "busy answers nil at once");
    assert!(free.is_some(), "granted at once when a permit is free");
    let script: Option<Vec<Value>> = cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 1000, 'SHARED', 'BLOCK', 0)")
        .arg(1)
        .arg("rw")
        .query(&mut con)
        .unwrap();
    // Each `BLOCK 0` above would wait forever had it waited: that it answered is the
    // proof it did not (no wall-clock bound a busy machine could break).
    assert_eq!(script, None);
    assert_eq!(waiters(&mut con, "rw"), 0);
    assert_eq!(waiters(&mut con, "sem"), 0);
}

#[test]
fn client_unblock_ends_a_shared_wait() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "rw", 60_000, &["TOKEN", "x"]);
    hold(&mut con, "sem", 60_000, &["TOKEN", "s", "LIMIT", "1"]);
    for (key, mode, unblock, expected) in [
        ("rw", "SHARED", None, Reply::Bulk(None)),
        ("sem", "LIMIT", None, Reply::Bulk(None)),
        (
            "sem",
            "LIMIT",
            Some("ERROR"),
            err("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
        ),
    ] {
        let mut waiter = RawClient::connect(server.port);
        let Reply::Integer(id) = waiter.call_str(&["CLIENT", "ID"]) else {
            panic!("CLIENT ID")
        };
        let mut argv = vec!["LOCK.ACQUIRE", key, "1000", "BLOCK", "0", mode];
        if mode == "LIMIT" {
            argv.push("1");
        }
        waiter.send_pipeline(&[&argv]);
        wait_for_waiters(&mut con, key, 1);
        let mut command = cmd("CLIENT");
        command.arg("UNBLOCK").arg(id);
        if let Some(how) = unblock {
            command.arg(how);
        }
        assert_eq!(command.query::<i64>(&mut con).unwrap(), 1);
        let reply = waiter.read_reply();
        if expected.is_nil() {
            assert!(reply.is_nil(), "{key} {unblock:?}: {reply:?}");
        } else {
            assert_eq!(reply, expected, "{key} {unblock:?}");
        }
        assert_eq!(waiters(&mut con, key), 0);
        assert_eq!(waiter.call_str(&["PING"]), Reply::Status("PONG".into()));
    }
    // Nobody is left to hand the lock to.
    assert_eq!(release(&mut con, "rw", "x"), 1);
    assert_eq!(int(&mut con, &["EXISTS", "rw"]), 0);
}

#[test]
fn a_queued_waiter_whose_mode_no_longer_matches_gets_wrongmode_at_its_turn() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "k1", 60_000, &["TOKEN", "x"]);
    let mut a = Waiter::queue(&server, &mut con, "k1", 60_000, "a", &["LIMIT", "2"]);
    let mut b = Waiter::queue(&server, &mut con, "k1", 60_000, "b", &["LIMIT", "3"]);
    let mut c = Waiter::queue(&server, &mut con, "k1", 60_000, "c", &["LIMIT", "2"]);
    let mut d = Waiter::queue(&server, &mut con, "k1", 60_000, "d", &["LIMIT", "2"]);
    assert_eq!(release(&mut con, "k1", "x"), 1);
    assert_eq!(a.granted().0, "a");
    assert_eq!(
        b.reply(Duration::from_secs(5)),
        err("WRONGMODE k1 is a semaphore with limit 2")
    );
    assert_eq!(c.granted().0, "c", "the next waiter that fits is served");
    d.assert_waiting("the semaphore of 2 is full");
    assert_eq!(holders(&mut con, "k1"), 2);
    assert_eq!(fence_of(&mut con, "k1", "b"), None);

    hold(&mut con, "k2", 60_000, &["TOKEN", "x"]);
    let mut a = Waiter::queue(&server, &mut con, "k2", 60_000, "a", &["SHARED"]);
    let mut b = Waiter::queue(&server, &mut con, "k2", 60_000, "b", &["LIMIT", "2"]);
    let mut c = Waiter::queue(&server, &mut con, "k2", 60_000, "c", &["SHARED"]);
    assert_eq!(release(&mut con, "k2", "x"), 1);
    assert_eq!(a.granted().0, "a");
    assert_eq!(
        b.reply(Duration::from_secs(5)),
        err("WRONGMODE k2 is held shared")
    );
    assert_eq!(c.granted().0, "c");
    assert_eq!(holders(&mut con, "k2"), 2);
    assert_eq!(waiters(&mut con, "k2"), 0);
}

#[test]
fn max_waiters_applies_to_shared_waiters() {
    let server = Server::with_module_args(&[], &["max-waiters", "2"]);
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    hold(&mut con, "rw", 60_000, &["TOKEN", "x"]);
    let _a = Waiter::queue(&server, &mut con, "rw", 1_000, "a", &["SHARED"]);
    let _b = Waiter::queue(&server, &mut con, "rw", 1_000, "b", &["LIMIT", "2"]);
    assert_eq!(
        acquire_raw(&mut raw, "rw", "1000", &["SHARED", "BLOCK", "0"]),
        err("ERR too many waiters")
    );
    assert_eq!(
        acquire_raw(&mut raw, "rw", "1000", &["LIMIT", "2", "BLOCK", "100"]),
        err("ERR too many waiters")
    );
    assert_eq!(
        acquire_raw(&mut raw, "rw", "1000", &["SHARED"]),
        Reply::Bulk(None),
        "without BLOCK still nil"
    );
    assert_eq!(waiters(&mut con, "rw"), 2);

    hold(&mut con, "sem", 60_000, &["TOKEN", "s", "LIMIT", "1"]);
    let _c = Waiter::queue(&server, &mut con, "sem", 1_000, "c", &["LIMIT", "1"]);
    let _d = Waiter::queue(&server, &mut con, "sem", 1_000, "d", &[]);
    assert_eq!(
        acquire_raw(&mut raw, "sem", "1000", &["LIMIT", "1", "BLOCK", "0"]),
        err("ERR too many waiters")
    );
}

/// An exclusive acquirer waits for the holder and a shared one queues behind it, although
/// it would fit; then the exclusive one stops waiting (`how`). What the shared one got
/// within a second.
fn reader_behind_a_writer_that_leaves(
    server: &Server,
    con: &mut Connection,
    key: &str,
    mode: &[&str],
    how: &str,
) -> Option<Reply> {
    let mut holder = vec!["TOKEN", "first"];
    holder.extend_from_slice(mode);
    hold(con, key, 60_000, &holder);
    let mut writer = RawClient::connect(server.port);
    let Reply::Integer(writer_id) = writer.call_str(&["CLIENT", "ID"]) else {
        panic!("CLIENT ID")
    };
    let timeout = if how == "timeout" { "200" } else { "0" };
    writer.send_pipeline(&[&["LOCK.ACQUIRE", key, "60000", "TOKEN", "w", "BLOCK", timeout]]);
    wait_for_waiters(con, key, 1);
    let mut reader = Waiter::queue(server, con, key, 60_000, "second", mode);
    match how {
        "timeout" => assert!(writer
            .try_read_reply(Duration::from_secs(3))
            .expect("the writer's BLOCK timed out")
            .is_nil()),
        "unblock" => {
            let unblocked: i64 = cmd("CLIENT")
                .arg("UNBLOCK")
                .arg(writer_id)
                .query(con)
                .unwrap();
            assert_eq!(unblocked, 1);
            assert!(writer.read_reply().is_nil());
        }
        // The reader's own reply shows when the server noticed the writer left.
        _ => drop(writer),
    }
    reader.0.try_read_reply(Duration::from_secs(1))
}

#[test]
fn waiters_behind_one_that_stops_waiting_are_granted_at_once_if_they_fit() {
    let server = Server::start();
    let mut con = server.connect();
    let mut stuck = Vec::new();
    for (kind, mode) in [("rw", vec!["SHARED"]), ("sem", vec!["LIMIT", "2"])] {
        for how in ["timeout", "unblock", "disconnect"] {
            let key = format!("{kind}-{how}");
            let reply = reader_behind_a_writer_that_leaves(&server, &mut con, &key, &mode, how);
            match reply.as_ref().and_then(Reply::grant) {
                Some((token, _)) => {
                    assert_eq!(token, b"second");
                    assert_eq!(holders(&mut con, &key), 2, "{key}");
                    assert_eq!(waiters(&mut con, &key), 0, "{key}");
                }
                None => stuck.push(format!("{key}: {reply:?}")),
            }
        }
    }
    assert!(
        stuck.is_empty(),
        "shared waiters left waiting although they fit: {stuck:?}"
    );
}
