//! Every inner command of `LOCK.GUARD` and `LOCK.FENCED`, on every kind of key, answers
//! exactly once, in order, with the reply the command gives when run directly: an
//! `ECHO` marker after each guarded call shows a lost or misplaced reply at once.
//! (Valkey 9.1 once lost a failed `GETDEL`/`GETSET`'s reply from a module call and
//! handed it to the next call, which then looked refused while it ran: a stale fence
//! admitted.)

use testkit::resp::{RawClient, Reply};
use testkit::*;

/// The kinds of value a key may hold, each made by one command (`{k}` is the key).
const KINDS: &[&[&str]] = &[
    &["SET", "{k}", "7"],
    &["HSET", "{k}", "f", "v"],
    &["RPUSH", "{k}", "a", "b"],
    &["SADD", "{k}", "a"],
    &["ZADD", "{k}", "1", "a"],
];

/// Inner commands with their arguments; none with a random or time-dependent reply.
const COMMANDS: &[&[&str]] = &[
    &["GET", "{k}"],
    &["SET", "{k}", "x"],
    &["GETDEL", "{k}"],
    &["GETSET", "{k}", "x"],
    &["GETEX", "{k}", "PERSIST"],
    &["APPEND", "{k}", "x"],
    &["STRLEN", "{k}"],
    &["INCR", "{k}"],
    &["INCRBY", "{k}", "2"],
    &["DECR", "{k}"],
    &["INCRBYFLOAT", "{k}", "1.5"],
    &["SETRANGE", "{k}", "0", "x"],
    &["GETRANGE", "{k}", "0", "1"],
    &["SETNX", "{k}", "x"],
    &["SETBIT", "{k}", "3", "1"],
    &["GETBIT", "{k}", "3"],
    &["BITCOUNT", "{k}"],
    &["HSET", "{k}", "g", "w"],
    &["HGET", "{k}", "f"],
    &["HDEL", "{k}", "f"],
    &["HGETALL", "{k}"],
    &["HINCRBY", "{k}", "n", "1"],
    &["HLEN", "{k}"],
    &["LPUSH", "{k}", "z"],
    &["RPUSH", "{k}", "z"],
    &["LPOP", "{k}"],
    &["RPOP", "{k}"],
    &["LLEN", "{k}"],
    &["LRANGE", "{k}", "0", "-1"],
    &["LINDEX", "{k}", "0"],
    &["LSET", "{k}", "0", "q"],
    &["LREM", "{k}", "0", "a"],
    &["LMOVE", "{k}", "{k}", "LEFT", "RIGHT"],
    &["SADD", "{k}", "b"],
    &["SREM", "{k}", "a"],
    &["SMEMBERS", "{k}"],
    &["SCARD", "{k}"],
    &["SISMEMBER", "{k}", "a"],
    &["ZADD", "{k}", "2", "b"],
    &["ZREM", "{k}", "a"],
    &["ZSCORE", "{k}", "a"],
    &["ZRANGE", "{k}", "0", "-1"],
    &["ZINCRBY", "{k}", "1", "a"],
    &["ZCARD", "{k}"],
    &["PFADD", "{k}", "a"],
    &["PFCOUNT", "{k}"],
    &["XADD", "{k}", "1-1", "f", "v"],
    &["XLEN", "{k}"],
    &["EXISTS", "{k}"],
    &["TYPE", "{k}"],
    &["EXPIRE", "{k}", "100"],
    &["PERSIST", "{k}"],
    &["TTL", "{k}"],
    &["DEL", "{k}"],
    &["UNLINK", "{k}"],
    &["OBJECT", "ENCODING", "{k}"],
    &["DUMP", "{k}"],
    &["COPY", "{k}", "{k}:copy", "REPLACE"],
];

fn with_key(argv: &[&str], key: &str) -> Vec<String> {
    argv.iter().map(|a| a.replace("{k}", key)).collect()
}

fn call(raw: &mut RawClient, argv: &[String]) -> Reply {
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    raw.call_str(&argv)
}

/// Makes `key` hold `kind` again, and nothing else of the run remain.
fn reset(raw: &mut RawClient, key: &str, kind: &[&str]) {
    raw.call_str(&["DEL", key, &format!("{key}:copy")]);
    assert!(!matches!(call(raw, &with_key(kind, key)), Reply::Error(_)));
}

#[test]
fn every_inner_command_on_every_kind_of_key_answers_once_in_order() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "lock:a", "600000", "TOKEN", "t"])
        .grant()
        .is_some());
    let mut fence = 100i64;
    assert!(raw
        .call_str(&["LOCK.MARK", "mark", &fence.to_string()])
        .is_ok());
    for kind in KINDS {
        for command in COMMANDS {
            for wrapper in ["guard", "fenced"] {
                // The same command run directly on an identical twin key: the reply
                // the guarded call must give.
                reset(&mut raw, "twin", kind);
                let expected = call(&mut raw, &with_key(command, "twin"));
                reset(&mut raw, "data", kind);
                fence += 1;
                let fence_text = fence.to_string();
                let inner = with_key(command, "data");
                let mut guarded_call: Vec<&str> = match wrapper {
                    "guard" => vec!["LOCK.GUARD", "lock:a", "t"],
                    _ => vec!["LOCK.FENCED", "mark", &fence_text],
                };
                guarded_call.extend(inner.iter().map(String::as_str));
                // A second fenced call right behind it, in the same event-loop turn:
                // it must get its own reply, and the mark must follow it.
                fence += 1;
                let next_fence = fence.to_string();
                let after = ["LOCK.FENCED", "mark", &next_fence, "INCR", "counter"];
                raw.send_pipeline(&[
                    &guarded_call,
                    &["ECHO", "marker-1"],
                    &after,
                    &["ECHO", "marker-2"],
                ]);
                let what = format!("{} on {} via {wrapper}", command.join(" "), kind[0]);
                let guarded = raw.read_reply();
                assert_eq!(
                    guarded, expected,
                    "{what}: the reply of the command run directly"
                );
                assert_eq!(
                    raw.read_reply(),
                    Reply::Bulk(Some(b"marker-1".to_vec())),
                    "{what}"
                );
                assert!(
                    matches!(raw.read_reply(), Reply::Integer(_)),
                    "{what}: the next fenced call's own reply"
                );
                assert_eq!(
                    raw.read_reply(),
                    Reply::Bulk(Some(b"marker-2".to_vec())),
                    "{what}"
                );
                // The mark followed the last admitted fence: one below it is stale.
                let below = (fence - 1).to_string();
                assert!(
                    matches!(
                        raw.call_str(&["LOCK.FENCED", "mark", &below, "GET", "counter"]),
                        Reply::Error(text) if text.starts_with("STALE ")
                    ),
                    "{what}: the mark is at {fence}"
                );
            }
        }
    }
}

/// An inner command that would delete, overwrite or rename the mark itself is refused
/// before it runs: a deleted mark would admit any older fence afterwards.
#[test]
fn a_fenced_command_may_not_touch_its_own_mark() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    assert!(raw.call_str(&["LOCK.MARK", "m", "100"]).is_ok());
    let refused = Reply::Error("ERR a fenced command may not touch its own mark".into());
    for inner in [
        &["DEL", "m"][..],
        &["UNLINK", "x", "m"],
        &["SET", "m", "x"],
        &["RENAME", "m", "n"],
        &["EXPIRE", "m", "1"],
        &["TYPE", "m"],
    ] {
        let mut argv = vec!["LOCK.FENCED", "m", "200"];
        argv.extend_from_slice(inner);
        assert_eq!(raw.call_str(&argv), refused, "{inner:?}");
    }
    assert_eq!(
        raw.call_str(&["TYPE", "m"]),
        Reply::Status("fencemark".into())
    );
    assert_eq!(
        raw.call_str(&["LOCK.FENCED", "m", "5", "SET", "data", "stale"]),
        Reply::Error("STALE fence is below the highest admitted (100)".into())
    );
}

/// A RESP3 client gets the inner command's RESP3 reply (a map, a double), as it would
/// from the command itself.
#[test]
fn a_resp3_client_gets_the_inner_commands_resp3_reply() {
    let server = Server::start();
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    let mut con = client.get_connection().unwrap();
    let run = |con: &mut redis::Connection, argv: &[&str]| -> redis::Value {
        let mut command = redis::cmd(argv[0]);
        for arg in &argv[1..] {
            command.arg(*arg);
        }
        command.query(con).unwrap()
    };
    run(&mut con, &["HSET", "h", "f", "v"]);
    run(&mut con, &["ZADD", "z", "1.5", "m"]);
    run(&mut con, &["LOCK.ACQUIRE", "l", "60000", "TOKEN", "t"]);
    for inner in [&["HGETALL", "h"][..], &["ZSCORE", "z", "m"]] {
        let direct = run(&mut con, inner);
        let mut guarded = vec!["LOCK.GUARD", "l", "t"];
        guarded.extend_from_slice(inner);
        assert_eq!(run(&mut con, &guarded), direct, "{inner:?}");
        let mut fenced = vec!["LOCK.FENCED", "mark", "5"];
        fenced.extend_from_slice(inner);
        assert_eq!(run(&mut con, &fenced), direct, "{inner:?}");
    }
    assert!(matches!(
        run(&mut con, &["HGETALL", "h"]),
        redis::Value::Map(_)
    ));
}
