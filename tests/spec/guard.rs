//! `LOCK.GUARD` and `LOCK.FENCED`: every reply and error byte for byte on a raw socket,
//! the inner command under the caller's ACL and script rules, inside `MULTI` and Lua,
//! under `maxmemory`, with its keys declared to Redis, and counted in `INFO`.

use testkit::resp::{err, RawClient, Reply};
use testkit::*;

fn bulk(text: &str) -> Reply {
    Reply::Bulk(Some(text.as_bytes().to_vec()))
}

const NOT_HELD: &str = "NOTHELD this token does not hold the lock";
const NOT_INSIDE: &str = "ERR this command is not allowed inside LOCK.GUARD or LOCK.FENCED";

/// A server with `lock:a` held by token `t`.
fn held() -> (Server, RawClient) {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "lock:a", "60000", "TOKEN", "t"])
        .grant()
        .is_some());
    (server, raw)
}

#[test]
fn a_guard_runs_the_command_only_while_the_token_holds_the_lock() {
    let (_server, mut raw) = held();
    let cases: Vec<(Vec<&str>, Reply)> = vec![
        (
            vec!["LOCK.GUARD", "lock:a", "t", "SET", "stock", "5"],
            Reply::Status("OK".into()),
        ),
        (
            vec!["LOCK.GUARD", "lock:a", "t", "INCRBY", "stock", "2"],
            Reply::Integer(7),
        ),
        (vec!["LOCK.GUARD", "lock:a", "t", "GET", "stock"], bulk("7")),
        (
            vec!["LOCK.GUARD", "lock:a", "t", "GET", "nothing"],
            Reply::Bulk(None),
        ),
        (
            vec!["LOCK.GUARD", "lock:a", "t", "MGET", "stock", "nothing"],
            Reply::Array(Some(vec![bulk("7"), Reply::Bulk(None)])),
        ),
        // The command's own error, unchanged.
        (
            vec!["LOCK.GUARD", "lock:a", "t", "LPUSH", "stock", "x"],
            err("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ),
        (
            vec!["LOCK.GUARD", "lock:a", "other", "SET", "stock", "0"],
            err(NOT_HELD),
        ),
        (
            vec!["LOCK.GUARD", "lock:free", "t", "SET", "stock", "0"],
            err(NOT_HELD),
        ),
        (
            vec!["LOCK.GUARD", "stock", "t", "SET", "stock", "0"],
            err("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ),
        (
            vec!["LOCK.GUARD", "lock:a", "", "SET", "stock", "0"],
            err("ERR invalid token"),
        ),
        (
            vec!["LOCK.GUARD", "lock:a", "t"],
            err("ERR wrong number of arguments for 'lock.guard' command"),
        ),
        (
            vec!["LOCK.GUARD", "lock:a", "t", "GET"],
            err("ERR wrong number of arguments for 'get' command"),
        ),
        // What a script may not call, a guard may not run.
        (
            vec!["LOCK.GUARD", "lock:a", "t", "MULTI"],
            err("ERR command 'multi' is not allowed on script mode"),
        ),
        (
            vec!["LOCK.GUARD", "lock:a", "t", "SUBSCRIBE", "ch"],
            err("ERR command 'subscribe' is not allowed on script mode"),
        ),
        (
            vec![
                "LOCK.GUARD",
                "lock:a",
                "t",
                "LOCK.GUARD",
                "lock:a",
                "t",
                "GET",
                "x",
            ],
            err(NOT_INSIDE),
        ),
        (
            vec![
                "LOCK.GUARD",
                "lock:a",
                "t",
                "LOCK.FENCED",
                "m",
                "1",
                "GET",
                "x",
            ],
            err(NOT_INSIDE),
        ),
        (
            vec![
                "LOCK.GUARD",
                "lock:a",
                "t",
                "LOCK.ACQUIRE",
                "lock:b",
                "100",
                "BLOCK",
                "0",
            ],
            err(NOT_INSIDE),
        ),
    ];
    for (argv, expected) in cases {
        assert_eq!(raw.call_str(&argv), expected, "{argv:?}");
    }
    // Nothing the refused calls asked for happened.
    assert_eq!(raw.call_str(&["GET", "stock"]), bulk("7"));
    assert_eq!(raw.call_str(&["EXISTS", "ch", "lock:b"]), Reply::Integer(0));
}

#[test]
fn a_released_or_expired_lock_no_longer_guards() {
    let (_server, mut raw) = held();
    assert_eq!(
        raw.call_str(&["LOCK.RELEASE", "lock:a", "t"]),
        Reply::Integer(1)
    );
    let refused = raw.call_str(&["LOCK.GUARD", "lock:a", "t", "SET", "x", "1"]);
    assert_eq!(refused, err(NOT_HELD));
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "lock:a", "50", "TOKEN", "t"])
        .grant()
        .is_some());
    std::thread::sleep(std::time::Duration::from_millis(80));
    let refused = raw.call_str(&["LOCK.GUARD", "lock:a", "t", "SET", "x", "1"]);
    assert_eq!(refused, err(NOT_HELD));
    assert_eq!(raw.call_str(&["EXISTS", "x"]), Reply::Integer(0));
}

#[test]
fn a_fence_mark_admits_fences_at_or_above_the_highest_only() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    let cases: Vec<(Vec<&str>, Reply)> = vec![
        (
            vec!["LOCK.FENCED", "mark:r", "10", "SET", "r", "a"],
            Reply::Status("OK".into()),
        ),
        (
            vec!["LOCK.FENCED", "mark:r", "10", "APPEND", "r", "b"],
            Reply::Integer(2),
        ),
        (
            vec!["LOCK.FENCED", "mark:r", "9", "SET", "r", "stale"],
            err("STALE fence is below the highest admitted (10)"),
        ),
        (vec!["LOCK.FENCED", "mark:r", "12", "GET", "r"], bulk("ab")),
        (
            vec!["LOCK.FENCED", "mark:r", "11", "GET", "r"],
            err("STALE fence is below the highest admitted (12)"),
        ),
        (
            vec!["LOCK.FENCED", "mark:r", "0", "SET", "r", "x"],
            err("ERR value is not an integer or out of range"),
        ),
        (
            vec!["LOCK.FENCED", "mark:r", "-1", "SET", "r", "x"],
            err("ERR value is not an integer or out of range"),
        ),
        (
            vec!["LOCK.FENCED", "mark:r", "x", "SET", "r", "x"],
            err("ERR value is not an integer or out of range"),
        ),
        (
            vec!["LOCK.FENCED", "r", "20", "SET", "r", "x"],
            err("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ),
        (
            vec!["LOCK.FENCED", "mark:r", "20"],
            err("ERR wrong number of arguments for 'lock.fenced' command"),
        ),
        (
            vec!["LOCK.FENCED", "mark:r", "20", "EXEC"],
            err("ERR command 'exec' is not allowed on script mode"),
        ),
    ];
    for (argv, expected) in cases {
        assert_eq!(raw.call_str(&argv), expected, "{argv:?}");
    }
    assert_eq!(raw.call_str(&["GET", "r"]), bulk("ab"));
    assert_eq!(
        raw.call_str(&["TYPE", "mark:r"]),
        Reply::Status("fencemark".into())
    );
    assert_eq!(
        raw.call_str(&["PTTL", "mark:r"]),
        Reply::Integer(-1),
        "never expires"
    );
    // A command refused, or failing with its own error, leaves the mark as it was.
    let failed = raw.call_str(&["LOCK.FENCED", "mark:r", "30", "LPUSH", "r", "x"]);
    assert!(matches!(&failed, Reply::Error(e) if e.starts_with("WRONGTYPE")));
    let stale = raw.call_str(&["LOCK.FENCED", "mark:r", "11", "GET", "r"]);
    assert_eq!(stale, err("STALE fence is below the highest admitted (12)"));
    let Reply::Integer(bytes) = raw.call_str(&["MEMORY", "USAGE", "mark:r"]) else {
        panic!("MEMORY USAGE")
    };
    assert!(bytes <= 72, "a mark takes {bytes} bytes");
    // Only DEL removes it (and re-opens the door to stale holders).
    assert_eq!(raw.call_str(&["DEL", "mark:r"]), Reply::Integer(1));
    let reopened = raw.call_str(&["LOCK.FENCED", "mark:r", "1", "GET", "r"]);
    assert_eq!(reopened, bulk("ab"));
}

#[test]
fn the_inner_command_runs_as_the_calling_user() {
    let (server, mut admin) = held();
    let setuser = admin.call_str(&["ACL", "SETUSER", "app", "on", ">secret", "~lock:*", "+@all"]);
    assert_eq!(setuser, Reply::Status("OK".into()));
    let mut app = RawClient::connect(server.port);
    assert_eq!(
        app.call_str(&["AUTH", "app", "secret"]),
        Reply::Status("OK".into())
    );
    let reply = app.call_str(&["LOCK.GUARD", "lock:a", "t", "SET", "stock:9", "1"]);
    assert!(
        matches!(&reply, Reply::Error(e) if e.starts_with("NOPERM")),
        "{reply:?}"
    );
    let reply = app.call_str(&["LOCK.FENCED", "lock:mark", "5", "SET", "stock:9", "1"]);
    assert!(
        matches!(&reply, Reply::Error(e) if e.starts_with("NOPERM")),
        "{reply:?}"
    );
    assert_eq!(admin.call_str(&["EXISTS", "stock:9"]), Reply::Integer(0));
    // A key the user may touch runs.
    let allowed = app.call_str(&["LOCK.GUARD", "lock:a", "t", "SET", "lock:data", "1"]);
    assert_eq!(allowed, Reply::Status("OK".into()));
}

#[test]
fn guards_check_at_exec_time_inside_multi_and_run_from_lua() {
    let (_server, mut raw) = held();
    raw.send_pipeline(&[
        &["MULTI"],
        &["LOCK.GUARD", "lock:a", "t", "SET", "x", "1"],
        &["LOCK.RELEASE", "lock:a", "t"],
        &["LOCK.GUARD", "lock:a", "t", "SET", "x", "2"],
        &["EXEC"],
    ]);
    for _ in 0..4 {
        assert!(!matches!(raw.read_reply(), Reply::Error(_)));
    }
    assert_eq!(
        raw.read_reply(),
        Reply::Array(Some(vec![
            Reply::Status("OK".into()),
            Reply::Integer(1),
            err(NOT_HELD)
        ]))
    );
    assert_eq!(raw.call_str(&["GET", "x"]), bulk("1"));
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "lock:a", "60000", "TOKEN", "t"])
        .grant()
        .is_some());
    let script = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'INCR', KEYS[2])";
    let ran = raw.call_str(&["EVAL", script, "2", "lock:a", "n", "t"]);
    assert_eq!(ran, Reply::Integer(1));
    let refused = raw.call_str(&["EVAL", script, "2", "lock:a", "n", "wrong"]);
    assert!(
        matches!(&refused, Reply::Error(e) if e.contains("NOTHELD")),
        "{refused:?}"
    );
    assert_eq!(raw.call_str(&["GET", "n"]), bulk("1"));
}

#[test]
fn writes_are_refused_under_maxmemory_and_reads_still_run() {
    let (_server, mut raw) = held();
    assert_eq!(raw.call_str(&["SET", "x", "1"]), Reply::Status("OK".into()));
    for (name, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
        assert_eq!(
            raw.call_str(&["CONFIG", "SET", name, value]),
            Reply::Status("OK".into())
        );
    }
    let write = raw.call_str(&["LOCK.GUARD", "lock:a", "t", "SET", "y", "1"]);
    assert!(
        matches!(&write, Reply::Error(e) if e.starts_with("OOM")),
        "{write:?}"
    );
    assert_eq!(
        raw.call_str(&["LOCK.GUARD", "lock:a", "t", "GET", "x"]),
        bulk("1")
    );
    let fenced = raw.call_str(&["LOCK.FENCED", "m", "1", "SET", "y", "1"]);
    assert!(
        matches!(&fenced, Reply::Error(e) if e.starts_with("OOM")),
        "{fenced:?}"
    );
    assert_eq!(
        raw.call_str(&["CONFIG", "SET", "maxmemory", "0"]),
        Reply::Status("OK".into())
    );
    assert_eq!(raw.call_str(&["EXISTS", "y", "m"]), Reply::Integer(0));
}

#[test]
fn both_declare_the_inner_commands_keys() {
    let (_server, mut raw) = held();
    let keys = |raw: &mut RawClient, argv: &[&str]| -> Vec<String> {
        let mut full = vec!["COMMAND", "GETKEYS"];
        full.extend_from_slice(argv);
        match raw.call_str(&full) {
            Reply::Array(Some(items)) => items
                .iter()
                .filter_map(|item| item.bulk().map(|b| String::from_utf8_lossy(b).into_owned()))
                .collect(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        keys(
            &mut raw,
            &["LOCK.GUARD", "lock:a", "t", "MSET", "x", "1", "y", "2"]
        ),
        ["lock:a", "x", "y"]
    );
    assert_eq!(
        keys(&mut raw, &["LOCK.FENCED", "mark", "5", "SET", "k", "v"]),
        ["mark", "k"]
    );
}

#[test]
fn guarded_runs_and_refusals_are_counted() {
    let (_server, mut raw) = held();
    raw.call_str(&["LOCK.GUARD", "lock:a", "t", "SET", "x", "1"]);
    raw.call_str(&["LOCK.GUARD", "lock:a", "u", "SET", "x", "1"]);
    raw.call_str(&["LOCK.FENCED", "m", "5", "SET", "x", "1"]);
    raw.call_str(&["LOCK.FENCED", "m", "4", "SET", "x", "1"]);
    let Reply::Bulk(Some(info)) = raw.call_str(&["INFO", "fencelock"]) else {
        panic!("INFO")
    };
    let info = String::from_utf8_lossy(&info);
    for field in [
        "fencelock_guarded:1",
        "fencelock_guard_refused:1",
        "fencelock_fenced:1",
        "fencelock_fenced_stale:1",
    ] {
        assert!(info.contains(field), "{field} in {info}");
    }
}

#[test]
fn a_check_that_changes_nothing_leaves_a_watch_alone() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    raw.call_str(&["LOCK.FENCED", "mark", "10", "SET", "x", "1"]);
    let mut watcher = RawClient::connect(server.port);
    for unchanged in [
        &["LOCK.FENCED", "mark", "10", "GET", "x"][..],
        &["LOCK.FENCED", "mark", "9", "GET", "x"],
        &["LOCK.MARK", "mark", "3"],
    ] {
        assert_eq!(
            watcher.call_str(&["WATCH", "mark"]),
            Reply::Status("OK".into())
        );
        raw.call_str(unchanged);
        watcher.send_pipeline(&[&["MULTI"], &["GET", "x"], &["EXEC"]]);
        watcher.read_reply();
        watcher.read_reply();
        assert_eq!(
            watcher.read_reply(),
            Reply::Array(Some(vec![bulk("1")])),
            "{unchanged:?} disturbed a WATCH on the mark"
        );
    }
}

#[test]
fn a_command_name_with_a_nul_inside_is_unknown() {
    let (_server, mut raw) = held();
    let reply = raw.call(&[b"LOCK.GUARD", b"lock:a", b"t", b"SET\0x", b"k", b"v"]);
    assert!(
        matches!(&reply, Reply::Error(e) if e.starts_with("ERR unknown command")),
        "{reply:?}"
    );
    assert_eq!(raw.call_str(&["EXISTS", "k"]), Reply::Integer(0));
}

/// A guard is one atomic step: no inner command may wait, on any server (Redis 7.0
/// refused the blocking list commands in script mode but ran `XREAD … BLOCK`; newer
/// servers ran them all without waiting). Nothing runs, and the mark stays as it was.
#[test]
fn no_command_that_waits_runs_inside_a_guard() {
    let (_server, mut raw) = held();
    assert!(!matches!(
        raw.call_str(&["XADD", "stream", "*", "f", "v"]),
        Reply::Error(_)
    ));
    assert!(raw.call_str(&["RPUSH", "list", "x"]).integer().is_some());
    let waiting: [&[&str]; 9] = [
        &[
            "LOCK.ACQUIRE",
            "lock:b",
            "1000",
            "SESSION",
            "s",
            "BLOCK",
            "0",
        ],
        &[
            "LOCK.ACQUIREALL",
            "2",
            "lock:b",
            "lock:c",
            "1000",
            "BLOCK",
            "0",
        ],
        &["BLPOP", "list", "1"],
        &["BLMOVE", "list", "other", "LEFT", "LEFT", "1"],
        &["BZPOPMIN", "zset", "1"],
        &["WAIT", "0", "100"],
        &["XREAD", "BLOCK", "100", "STREAMS", "stream", "0"],
        &[
            "XREAD", "COUNT", "1", "BLOCK", "100", "STREAMS", "stream", "0",
        ],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "100",
            "STREAMS",
            "stream",
            ">",
        ],
    ];
    for inner in waiting {
        let mut guard = vec!["LOCK.GUARD", "lock:a", "t"];
        guard.extend(inner);
        assert_eq!(raw.call_str(&guard), err(NOT_INSIDE), "{inner:?}");
        let mut fenced = vec!["LOCK.FENCED", "mark", "7"];
        fenced.extend(inner);
        assert_eq!(raw.call_str(&fenced), err(NOT_INSIDE), "{inner:?}");
    }
    assert_eq!(
        raw.call_str(&["LLEN", "list"]).integer(),
        Some(1),
        "BLPOP never ran"
    );
    assert_eq!(raw.call_str(&["EXISTS", "mark"]).integer(), Some(0));
    // Reading a stream without waiting is a read like any other.
    let read = raw.call_str(&[
        "LOCK.GUARD",
        "lock:a",
        "t",
        "XREAD",
        "STREAMS",
        "stream",
        "0",
    ]);
    assert!(matches!(read, Reply::Array(Some(_))), "{read:?}");
}

/// Commands that name no key can still remove a mark: a fence check refuses the ones
/// that empty or exchange a whole database, before they run.
#[test]
fn a_fence_check_refuses_commands_that_empty_its_database() {
    let (_server, mut raw) = held();
    assert!(raw
        .call_str(&["LOCK.FENCED", "mark", "100", "SET", "x", "1"])
        .is_ok());
    for inner in [
        &["FLUSHDB"][..],
        &["FLUSHALL", "SYNC"],
        &["flushall"],
        &["SWAPDB", "0", "1"],
    ] {
        let mut fenced = vec!["LOCK.FENCED", "mark", "100"];
        fenced.extend(inner);
        assert_eq!(
            raw.call_str(&fenced),
            err("ERR a fenced command may not touch its own mark"),
            "{inner:?}"
        );
    }
    assert_eq!(raw.call_str(&["EXISTS", "mark", "x"]).integer(), Some(2));
    assert_eq!(
        raw.call_str(&["LOCK.FENCED", "mark", "5", "SET", "x", "stale"]),
        err("STALE fence is below the highest admitted (100)")
    );
}

/// Redis 8's vector-set commands `VSIM` and `VADD … CAS` run in a thread and wait for
/// it: inside a guard that takes the server down, and an argument spelled `NOTHREAD`
/// (an element, a key, a vector blob) cannot be told from the option without parsing
/// their whole grammar. Both are refused like any command that waits.
#[test]
fn a_guard_refuses_the_vector_set_commands_that_may_run_in_a_thread() {
    let (_server, mut raw) = held();
    if matches!(raw.call_str(&["COMMAND", "INFO", "VSIM"]), Reply::Array(Some(ref infos)) if infos.first().is_some_and(Reply::is_nil))
    {
        return; // a server without vector sets
    }
    for add in [
        &["VADD", "v", "VALUES", "2", "1", "1", "a"][..],
        &["VADD", "v", "VALUES", "2", "1", "2", "NOTHREAD"],
        &["VADD", "NOTHREAD", "VALUES", "2", "1", "1", "a"],
    ] {
        assert!(raw.call_str(add).integer().is_some(), "{add:?}");
    }
    let threaded: [&[&str]; 6] = [
        &["VSIM", "v", "ELE", "a"],
        &["VSIM", "v", "ELE", "a", "NOTHREAD"],
        &["VSIM", "v", "ELE", "NOTHREAD"],
        &["VSIM", "NOTHREAD", "ELE", "a"],
        &["VSIM", "v", "FP32", "NOTHREAD"],
        &["VADD", "v", "VALUES", "2", "1", "3", "d", "CAS"],
    ];
    for wrapper in [
        &["LOCK.GUARD", "lock:a", "t"][..],
        &["LOCK.FENCED", "mark", "5"],
    ] {
        for inner in threaded {
            let mut argv = wrapper.to_vec();
            argv.extend(inner);
            assert_eq!(raw.call_str(&argv), err(NOT_INSIDE), "{argv:?}");
        }
    }
    assert_eq!(raw.call_str(&["PING"]), Reply::Status("PONG".into()));
}
