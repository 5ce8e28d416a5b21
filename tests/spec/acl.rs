//! ACL key patterns apply to lock keys: a user limited to `~app:*` gets NOPERM on
//! `lock:*` from every command, and a read-only pattern (`%R~lock:*`) may read a lock
//! (LOCK.FENCE, LOCK.INFO) but not acquire, refresh, release or apply one; the
//! session commands need the permissions of the keyed commands they stand for, for the
//! keys their session holds or waits for, within one selector.

use testkit::resp::RawClient;
use testkit::*;

/// Makes user `name` (password `secret`) with exactly these rules.
pub(crate) fn define_user(server: &Server, name: &str, rules: &[&str]) {
    let mut admin = server.connect();
    let _: () = cmd("ACL")
        .arg("SETUSER")
        .arg(name)
        .arg("on")
        .arg(">secret")
        .arg(rules)
        .query(&mut admin)
        .expect("ACL SETUSER");
}

/// A connection logged in as user `name` (password `secret`).
pub(crate) fn login(server: &Server, name: &str) -> Connection {
    let mut con = server.connect();
    let _: () = cmd("AUTH")
        .arg(name)
        .arg("secret")
        .query(&mut con)
        .expect("AUTH");
    con
}

/// Makes user `name` (password `secret`) with these key rules and `+@all`.
pub(crate) fn set_user(server: &Server, name: &str, rules: &[&str]) {
    define_user(server, name, &[rules, &["+@all"]].concat());
}

fn user(server: &Server, name: &str, rules: &[&str]) -> Connection {
    set_user(server, name, rules);
    login(server, name)
}

/// The error code of a command's reply, or "OK" when it succeeded.
fn outcome(con: &mut Connection, argv: &[&str]) -> String {
    let (name, rest) = argv.split_first().expect("a command");
    match cmd(name).arg(rest).query::<Value>(con) {
        Ok(_) => "OK".into(),
        Err(error) => error.code().unwrap_or("?").to_string(),
    }
}

fn all_commands<'a>(key: &'a str, token: &'a str) -> [Vec<&'a str>; 8] {
    [
        vec!["LOCK.ACQUIRE", key, "10000"],
        vec!["LOCK.REFRESH", key, token, "10000"],
        vec!["LOCK.RELEASE", key, token],
        vec!["LOCK.FENCE", key],
        vec!["LOCK.INFO", key],
        vec!["LOCK.ACQUIRE", key, "10000", "LIMIT", "3"],
        vec!["LOCK.APPLY", key, token, "5"],
        vec!["LOCK.DROP", key, token],
    ]
}

#[test]
fn a_user_limited_to_app_keys_gets_noperm_on_lock_keys() {
    let server = Server::start();
    let mut admin = server.connect();
    let (token, _) = acquire(&mut admin, "lock:x", 60_000, &[]).unwrap();
    let mut app = user(&server, "app", &["~app:*"]);
    for argv in all_commands("lock:x", &token) {
        assert_eq!(outcome(&mut app, &argv), "NOPERM", "{argv:?}");
    }
    assert!(fence(&mut admin, "lock:x").is_some(), "nothing changed");
    // Its own keys work with every command.
    let (own, _) = acquire(&mut app, "app:x", 60_000, &[]).unwrap();
    for argv in all_commands("app:x", &own).iter().skip(1) {
        assert_eq!(outcome(&mut app, argv), "OK", "{argv:?}");
    }
}

#[test]
fn a_read_only_key_pattern_reads_locks_but_cannot_change_them() {
    let server = Server::start();
    let mut admin = server.connect();
    let (token, fence_before) = acquire(&mut admin, "lock:x", 60_000, &[]).unwrap();
    let mut reader = user(&server, "reader", &["%R~lock:*"]);
    let expected = [
        "NOPERM", "NOPERM", "NOPERM", "OK", "OK", "NOPERM", "NOPERM", "NOPERM",
    ];
    for (argv, want) in all_commands("lock:x", &token).iter().zip(expected) {
        assert_eq!(outcome(&mut reader, argv), want, "{argv:?}");
    }
    let read: Option<i64> = cmd("LOCK.FENCE")
        .arg("lock:x")
        .arg(&token)
        .query(&mut reader)
        .unwrap();
    assert_eq!(read, Some(fence_before));
    assert_eq!(fence(&mut admin, "lock:x"), Some(fence_before));
    assert!(
        int(&mut admin, &["PTTL", "lock:x"]) > 50_000,
        "not refreshed"
    );
}

#[test]
fn a_write_only_key_pattern_may_not_read_a_lock_by_any_command() {
    let server = Server::start();
    let mut admin = server.connect();
    acquire(
        &mut admin,
        "lock:x",
        60_000,
        &["TOKEN", "t", "SESSION", "s", "VALUE", "10.0.0.1:80"],
    )
    .unwrap();
    let mut writer = user(&server, "writer", &["%W~lock:*"]);
    let reads: [&[&str]; 5] = [
        &["LOCK.FENCE", "lock:x"],
        &["LOCK.FENCE", "lock:x", "t"],
        &["LOCK.OBSERVE", "lock:x"],
        &["LOCK.INFO", "lock:x"],
        &["LOCK.HELD", "s"],
    ];
    for argv in reads {
        assert_eq!(outcome(&mut writer, argv), "NOPERM", "{argv:?}");
    }
    // The keyless listing says which key, in the session commands' wording.
    let mut raw = testkit::resp::RawClient::connect(server.port);
    assert!(raw.call_str(&["AUTH", "writer", "secret"]).is_ok());
    assert_eq!(
        raw.call_str(&["LOCK.HELD", "s"]),
        testkit::resp::err("NOPERM User writer has no permissions to access the 'lock:x' key")
    );
    // What it may write it still writes.
    assert_eq!(
        outcome(&mut writer, &["LOCK.REFRESH", "lock:x", "t", "10000"]),
        "OK"
    );
}

#[test]
fn close_needs_permission_for_the_keys_its_session_waits_for() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "other:x", 30_000, &["TOKEN", "owner"]).unwrap();
    let mut waiter = RawClient::connect(server.port);
    waiter.send_pipeline(&[&[
        "LOCK.ACQUIRE",
        "other:x",
        "30000",
        "SESSION",
        "s",
        "BLOCK",
        "0",
    ]]);
    wait_for_waiters(&mut con, "other:x", 1);
    let _: () = cmd("ACL")
        .arg(&["SETUSER", "locks", "on", "nopass", "+@all", "~lock:*"])
        .query(&mut con)
        .unwrap();
    let mut limited = RawClient::connect(server.port);
    assert!(limited.call_str(&["AUTH", "locks", "x"]).is_ok());
    assert_eq!(
        limited.call_str(&["LOCK.CLOSE", "s"]),
        testkit::resp::err("NOPERM User locks has no permissions to access the 'other:x' key"),
        "the wait is on a key the user may not touch"
    );
    assert_eq!(waiters(&mut con, "other:x"), 1, "still waiting");
    assert_eq!(int(&mut con, &["LOCK.CLOSE", "s"]), 0);
    assert!(
        waiter.read_reply().is_nil(),
        "answered nil by the permitted close"
    );
}

#[test]
fn a_session_command_needs_the_keyed_commands_permission_in_one_selector() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(
        &mut con,
        "other:b",
        30_000,
        &["TOKEN", "tb", "SESSION", "S"],
    )
    .unwrap();
    // The root allows the lock commands on lock:*; a selector allows only GET on other:*.
    let _: () = cmd("ACL")
        .arg(&[
            "SETUSER",
            "sel",
            "on",
            "nopass",
            "-@all",
            "+lock.acquire",
            "+lock.release",
            "+lock.refresh",
            "+lock.info",
            "+lock.close",
            "+lock.keepalive",
            "+lock.held",
            "~lock:*",
            "(+get ~other:*)",
        ])
        .query(&mut con)
        .unwrap();
    let mut sel = RawClient::connect(server.port);
    assert!(sel.call_str(&["AUTH", "sel", "x"]).is_ok());
    let refused =
        testkit::resp::err("NOPERM User sel has no permissions to access the 'other:b' key");
    let before = int(&mut con, &["PTTL", "other:b"]);
    for command in [
        &["LOCK.KEEPALIVE", "S", "999999"][..],
        &["LOCK.CLOSE", "S"],
        &["LOCK.HELD", "S"],
    ] {
        assert_eq!(sel.call_str(command), refused, "{command:?}");
    }
    assert!(
        int(&mut con, &["PTTL", "other:b"]) <= before,
        "not kept alive"
    );
    assert!(fence_of(&mut con, "other:b", "tb").is_some());
}
