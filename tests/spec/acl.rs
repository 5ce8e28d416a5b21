//! ACL key patterns apply to lock keys: a user limited to `~app:*` gets NOPERM on
//! `lock:*` from every command, and a read-only pattern (`%R~lock:*`) may read a lock
//! (LOCK.FENCE, LOCK.INFO) but not acquire, refresh, release or apply one.

use testkit::*;

/// Makes user `name` (password `secret`) with `+@all` and these key rules.
pub(crate) fn set_user(server: &Server, name: &str, rules: &[&str]) {
    let mut admin = server.connect();
    let _: () = cmd("ACL")
        .arg("SETUSER")
        .arg(name)
        .arg("on")
        .arg(">secret")
        .arg(rules)
        .arg("+@all")
        .query(&mut admin)
        .expect("ACL SETUSER");
}

fn user(server: &Server, name: &str, rules: &[&str]) -> Connection {
    set_user(server, name, rules);
    let mut con = server.connect();
    let _: () = cmd("AUTH")
        .arg(name)
        .arg("secret")
        .query(&mut con)
        .expect("AUTH");
    con
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
