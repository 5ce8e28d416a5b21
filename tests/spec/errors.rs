//! Every error reply, byte for byte as the server sends it; bad input never changes a
//! lock. (Random argv against every command: `reliability_input.rs`.)

use testkit::resp::{err, RawClient, Reply};
use testkit::*;

const NOT_INT: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";
const BAD_TOKEN: &str = "ERR invalid token";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const ACQ_EXPIRE: &str = "ERR invalid expire time in 'lock.acquire' command";
const REF_EXPIRE: &str = "ERR invalid expire time in 'lock.refresh' command";

fn arity(command: &str) -> String {
    format!("ERR wrong number of arguments for '{command}' command")
}

#[test]
fn every_error_reply_is_worded_as_redis_words_it() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    let long_token = "x".repeat(257);
    let max_token = "x".repeat(256);
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["LOCK.ACQUIRE"], arity("lock.acquire")),
        (vec!["LOCK.ACQUIRE", "k"], arity("lock.acquire")),
        (vec!["LOCK.REFRESH", "k", "t"], arity("lock.refresh")),
        (vec!["LOCK.REFRESH", "k", "t", "1", "x"], SYNTAX.into()),
        (
            vec!["LOCK.REFRESH", "k", "t", "1", "ADD", "ADD"],
            SYNTAX.into(),
        ),
        (vec!["LOCK.RELEASE", "k"], arity("lock.release")),
        (vec!["LOCK.RELEASE", "k", "t", "x"], arity("lock.release")),
        (vec!["LOCK.FENCE"], arity("lock.fence")),
        (vec!["LOCK.FENCE", "k", "t", "x"], arity("lock.fence")),
        (vec!["LOCK.INFO"], arity("lock.info")),
        (vec!["LOCK.ACQUIRE", "k", "abc"], NOT_INT.into()),
        (vec!["LOCK.ACQUIRE", "k", "1.5"], NOT_INT.into()),
        (
            vec!["LOCK.ACQUIRE", "k", "99999999999999999999"],
            NOT_INT.into(),
        ),
        (vec!["LOCK.ACQUIRE", "k", ""], NOT_INT.into()),
        (vec!["LOCK.REFRESH", "k", "t", "abc"], NOT_INT.into()),
        (vec!["LOCK.ACQUIRE", "k", "0"], ACQ_EXPIRE.into()),
        (vec!["LOCK.ACQUIRE", "k", "-5"], ACQ_EXPIRE.into()),
        (
            vec!["LOCK.ACQUIRE", "k", "9223372036854775807"],
            ACQ_EXPIRE.into(),
        ),
        (vec!["LOCK.REFRESH", "k", "t", "0"], REF_EXPIRE.into()),
        (vec!["LOCK.REFRESH", "k", "t", "-1"], REF_EXPIRE.into()),
        (
            vec!["LOCK.REFRESH", "k", "t", "9223372036854775807"],
            REF_EXPIRE.into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "100", "BLOCK", "x"],
            NOT_INT.into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "100", "BLOCK", "-1"],
            "ERR timeout is negative".into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "100", "BLOCK", "9223372036854775807"],
            "ERR timeout is out of range".into(),
        ),
        (vec!["LOCK.ACQUIRE", "k", "100", "TOKEN"], SYNTAX.into()),
        (vec!["LOCK.ACQUIRE", "k", "100", "BLOCK"], SYNTAX.into()),
        (vec!["LOCK.ACQUIRE", "k", "100", "NX"], SYNTAX.into()),
        (vec!["LOCK.ACQUIRE", "k", "100", "FOO", "1"], SYNTAX.into()),
        (
            vec!["LOCK.ACQUIRE", "k", "100", "TOKEN", "a", "TOKEN", "b"],
            SYNTAX.into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "100", "BLOCK", "1", "block", "1"],
            SYNTAX.into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "100", "TOKEN", ""],
            BAD_TOKEN.into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "100", "TOKEN", &long_token],
            BAD_TOKEN.into(),
        ),
        (vec!["LOCK.REFRESH", "k", "", "100"], BAD_TOKEN.into()),
        (
            vec!["LOCK.REFRESH", "k", &long_token, "100"],
            BAD_TOKEN.into(),
        ),
        (vec!["LOCK.RELEASE", "k", ""], BAD_TOKEN.into()),
        (vec!["LOCK.RELEASE", "k", &long_token], BAD_TOKEN.into()),
        (vec!["LOCK.FENCE", "k", ""], BAD_TOKEN.into()),
    ];
    for (argv, expected) in &cases {
        assert_eq!(raw.call_str(argv), err(expected), "{argv:?}");
    }
    assert_eq!(
        raw.call_str(&["EXISTS", "k"]),
        Reply::Integer(0),
        "no error created a lock"
    );
    // The 256-byte token is the longest accepted.
    assert!(matches!(
        raw.call_str(&["LOCK.ACQUIRE", "k", "100", "TOKEN", &max_token]),
        Reply::Array(Some(_))
    ));
}

#[test]
fn other_types_get_wrongtype_from_every_command() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(raw.call_str(&["SET", "s", "v"]), Reply::Status("OK".into()));
    assert_eq!(raw.call_str(&["HSET", "h", "f", "v"]), Reply::Integer(1));
    for key in ["s", "h"] {
        for argv in [
            vec!["LOCK.ACQUIRE", key, "100"],
            vec!["LOCK.ACQUIRE", key, "100", "BLOCK", "10"],
            vec!["LOCK.REFRESH", key, "t", "100"],
            vec!["LOCK.RELEASE", key, "t"],
            vec!["LOCK.FENCE", key],
            vec!["LOCK.FENCE", key, "t"],
            vec!["LOCK.INFO", key],
        ] {
            assert_eq!(raw.call_str(&argv), err(WRONGTYPE), "{argv:?}");
        }
    }
    assert_eq!(
        raw.call_str(&["GET", "s"]),
        Reply::Bulk(Some(b"v".to_vec()))
    );
}

#[test]
fn errors_leave_a_held_lock_exactly_as_it_was() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, fence) = acquire(&mut con, "k", 60_000, &["TOKEN", "owner"]).unwrap();
    let digest_before: String = cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg("k")
        .query::<Vec<String>>(&mut con)
        .unwrap()
        .remove(0);
    let mut raw = RawClient::connect(server.port);
    let bad: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", "k", "0", "TOKEN", "owner"],
        vec!["LOCK.ACQUIRE", "k", "x", "TOKEN", "owner"],
        vec![
            "LOCK.ACQUIRE",
            "k",
            "100",
            "TOKEN",
            "owner",
            "TOKEN",
            "owner",
        ],
        vec!["LOCK.ACQUIRE", "k", "100", "TOKEN", "owner", "BLOCK", "-1"],
        vec!["LOCK.REFRESH", "k", "owner", "0"],
        vec!["LOCK.REFRESH", "k", "owner", "x"],
        vec!["LOCK.REFRESH", "k", "", "100"],
        vec!["LOCK.RELEASE", "k", ""],
        vec!["LOCK.RELEASE", "k"],
        vec!["LOCK.APPLY", "k", "thief", "0"],
        vec!["LOCK.APPLY", "k", "thief", "5", "PXAT", "-1"],
    ];
    for argv in &bad {
        assert!(matches!(raw.call_str(argv), Reply::Error(_)), "{argv:?}");
    }
    assert_eq!(fence_of(&mut con), Some(fence));
    let digest_after: String = cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg("k")
        .query::<Vec<String>>(&mut con)
        .unwrap()
        .remove(0);
    assert_eq!(digest_before, digest_after);
    assert!(int(&mut con, &["PTTL", "k"]) > 50_000);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 1);
}

fn fence_of(con: &mut Connection) -> Option<i64> {
    fence(con, "k")
}

#[test]
fn max_ttl_and_max_token_length_are_enforced_from_config() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-ttl")
        .arg("1000")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        raw.call_str(&["LOCK.ACQUIRE", "k", "1001"]),
        err(ACQ_EXPIRE)
    );
    assert!(matches!(
        raw.call_str(&["LOCK.ACQUIRE", "k", "1000", "TOKEN", "t"]),
        Reply::Array(Some(_))
    ));
    assert_eq!(
        raw.call_str(&["LOCK.REFRESH", "k", "t", "1001"]),
        err(REF_EXPIRE)
    );
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-token-length")
        .arg("4")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        raw.call_str(&["LOCK.ACQUIRE", "j", "100", "TOKEN", "abcde"]),
        err(BAD_TOKEN)
    );
    let refused = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-ttl")
        .arg("0")
        .query::<()>(&mut con);
    assert!(refused.is_err(), "bounds are checked");
}

#[test]
fn fences_never_repeat_even_when_the_clock_is_pushed_to_its_maximum() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    let max = i64::MAX.to_string();
    let below = (i64::MAX - 1).to_string();
    assert_eq!(
        raw.call_str(&["LOCK.APPLY", "x", "t", &below]),
        Reply::Status("OK".into())
    );
    let Reply::Array(Some(grant)) = raw.call_str(&["LOCK.ACQUIRE", "a", "1000"]) else {
        panic!("the last fence is still issued")
    };
    assert_eq!(grant[1], Reply::Integer(i64::MAX));
    let exhausted = err("ERR no fence left to issue: the fence clock is at its maximum");
    assert_eq!(raw.call_str(&["LOCK.ACQUIRE", "b", "1000"]), exhausted);
    assert_eq!(raw.call_str(&["EXISTS", "b"]), Reply::Integer(0));
    assert_eq!(
        raw.call_str(&["LOCK.APPLY", "y", "t", &max]),
        Reply::Status("OK".into())
    );
    assert_eq!(raw.call_str(&["LOCK.ACQUIRE", "c", "1000"]), exhausted);
    let overflow = "9223372036854775808";
    assert_eq!(
        raw.call_str(&["LOCK.APPLY", "z", "t", overflow]),
        err(NOT_INT)
    );
}
