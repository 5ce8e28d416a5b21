//! A panic inside the module is stopped at the boundary: the client gets
//! `ERR internal error in fencelock (…)`, the server logs it and keeps serving, and no
//! lock is left changed half-way. Runs against a build with the test-only feature
//! `panic-injection` (`make test` builds it into `target/panic-injection`), where a
//! token `fencelock-panic:<site>` forces a panic at that site.

use std::path::PathBuf;
use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

fn panicking_module() -> PathBuf {
    let path = std::env::var_os("FENCELOCK_PANIC_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            testkit::paths::workspace_root().join("target/panic-injection/libfencelock.so")
        });
    assert!(
        path.exists(),
        "{} is missing: build it with `make build-panic-injection`",
        path.display()
    );
    path
}

fn server() -> Server {
    Server::with_options(Options {
        module: Some(panicking_module()),
        ..Options::default()
    })
}

/// `k` held by one client, and a raw client waiting for it with the token
/// `fencelock-panic:<site>` and `BLOCK <block_ms>`; returns the holder's token.
fn held_with_waiter(
    server: &Server,
    con: &mut Connection,
    site: &str,
    block_ms: &str,
) -> (String, RawClient) {
    let (holder, _) = acquire(con, "k", 60_000, &[]).unwrap();
    let token = format!("fencelock-panic:{site}");
    let mut waiter = RawClient::connect(server.port);
    waiter.send_pipeline(&[&[
        "LOCK.ACQUIRE",
        "k",
        "10000",
        "TOKEN",
        &token,
        "BLOCK",
        block_ms,
    ]]);
    (holder, waiter)
}

fn is_internal_error(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(text) if text.starts_with("ERR internal error in fencelock (injected panic at "))
}

#[test]
fn a_panicking_command_answers_an_error_and_the_server_keeps_serving() {
    let server = server();
    let mut raw = RawClient::connect(server.port);
    let reply = raw.call_str(&[
        "LOCK.ACQUIRE",
        "k",
        "10000",
        "TOKEN",
        "fencelock-panic:command",
    ]);
    assert!(is_internal_error(&reply), "{reply:?}");
    assert_eq!(
        raw.call_str(&["EXISTS", "k"]),
        Reply::Integer(0),
        "nothing written"
    );
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "k", "10000"])
        .grant()
        .is_some());
    assert!(server.log().contains("internal error in lock.acquire"));
}

#[test]
fn a_panicking_timer_is_logged_and_the_waiter_is_still_served() {
    let server = server();
    let mut con = server.connect();
    let (holder, mut waiter) = held_with_waiter(&server, &mut con, "timer", "50");
    eventually(Duration::from_secs(5), "the timer panicked", || {
        server.log().contains("internal error in a BLOCK timeout")
    });
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &holder]), 1);
    let reply = waiter
        .try_read_reply(Duration::from_secs(5))
        .expect("the waiter is answered");
    assert_eq!(
        reply.grant().map(|(token, _)| token.to_vec()),
        Some(b"fencelock-panic:timer".to_vec())
    );
}

#[test]
fn a_panicking_reply_answers_an_error_and_gives_the_lock_back() {
    let server = server();
    let mut con = server.connect();
    let (holder, mut waiter) = held_with_waiter(&server, &mut con, "reply", "0");
    eventually(Duration::from_secs(5), "the waiter queued", || {
        info_field(&mut con, "fencelock", "fencelock_waiters").as_deref() == Some("1")
    });
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &holder]), 1);
    let reply = waiter
        .try_read_reply(Duration::from_secs(5))
        .expect("the waiter is answered");
    assert!(is_internal_error(&reply), "{reply:?}");
    assert_eq!(waiter.call_str(&["PING"]), Reply::Status("PONG".into()));
    eventually(
        Duration::from_secs(5),
        "the undelivered grant was given back",
        || int(&mut con, &["EXISTS", "k"]) == 0,
    );
    assert!(acquire(&mut con, "k", 1_000, &[]).is_some());
}
