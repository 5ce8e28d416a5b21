//! The four lock commands against a real server: grants, contention, idempotent retry,
//! refresh, release, fences, key type and ttl, token uniqueness.

use std::collections::HashSet;

use testkit::*;

#[test]
fn acquire_grants_a_free_lock_with_token_and_fence() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, fence) = acquire(&mut con, "lock:a", 10_000, &[]).expect("granted");
    assert_eq!(token.len(), 32);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(fence > 0);
    let kind: String = cmd("TYPE").arg("lock:a").query(&mut con).unwrap();
    assert_eq!(kind, "fencelock");
    let pttl = int(&mut con, &["PTTL", "lock:a"]);
    assert!(pttl > 9_000 && pttl <= 10_000, "pttl {pttl}");
    assert_eq!(fence_of(&mut con, "lock:a"), Some(fence));
}

fn fence_of(con: &mut Connection, key: &str) -> Option<i64> {
    fence(con, key)
}

#[test]
fn keys_are_used_exactly_as_given() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "orders/42", 5_000, &[]).expect("granted");
    let keys: Vec<String> = cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, vec!["orders/42".to_string()]);
}

#[test]
fn a_held_lock_is_busy_for_others_and_unchanged() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, fence) = acquire(&mut con, "k", 10_000, &[]).unwrap();
    assert_eq!(acquire(&mut con, "k", 20_000, &[]), None);
    assert_eq!(acquire(&mut con, "k", 20_000, &["TOKEN", "other"]), None);
    assert_eq!(fence_of(&mut con, "k"), Some(fence));
    assert!(int(&mut con, &["PTTL", "k"]) <= 10_000);
    assert_eq!(
        cmd("LOCK.FENCE")
            .arg("k")
            .arg(&token)
            .query::<Option<i64>>(&mut con)
            .unwrap(),
        Some(fence)
    );
}

#[test]
fn same_token_retry_is_idempotent_and_resets_the_lease() {
    let server = Server::start();
    let mut con = server.connect();
    let first = acquire(&mut con, "k", 1_000, &["TOKEN", "job-7"]).unwrap();
    assert_eq!(first.0, "job-7");
    let again = acquire(&mut con, "k", 60_000, &["token", "job-7"]).unwrap();
    assert_eq!(again, first, "same token and same fence");
    assert!(int(&mut con, &["PTTL", "k"]) > 50_000);
}

#[test]
fn options_are_case_insensitive_in_any_order() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, _) = acquire(&mut con, "k", 1_000, &["ToKeN", "t1", "block", "10"]).unwrap();
    assert_eq!(token, "t1");
    let (token, _) = acquire(&mut con, "k2", 1_000, &["BLOCK", "0", "TOKEN", "t2"]).unwrap();
    assert_eq!(token, "t2");
}

#[test]
fn refresh_extends_only_the_holders_live_lease() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, fence) = acquire(&mut con, "k", 1_000, &[]).unwrap();
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "k", &token, "30000"]), 1);
    let pttl = int(&mut con, &["PTTL", "k"]);
    assert!(pttl > 29_000, "pttl {pttl}");
    assert_eq!(
        fence_of(&mut con, "k"),
        Some(fence),
        "refresh keeps the fence"
    );
    assert_eq!(
        int(&mut con, &["LOCK.REFRESH", "k", "intruder", "30000"]),
        0
    );
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "free", &token, "30000"]), 0);
    assert_eq!(
        int(&mut con, &["EXISTS", "free"]),
        0,
        "refresh never creates a lock"
    );
}

#[test]
fn refresh_never_revives_an_expired_lease() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, _) = acquire(&mut con, "k", 30, &[]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(80));
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "k", &token, "30000"]), 0);
    assert_eq!(int(&mut con, &["EXISTS", "k"]), 0);
}

#[test]
fn release_frees_only_for_the_holder_and_leaves_no_key() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, _) = acquire(&mut con, "k", 10_000, &[]).unwrap();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", "intruder"]), 0);
    assert_eq!(int(&mut con, &["EXISTS", "k"]), 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 1);
    assert_eq!(int(&mut con, &["EXISTS", "k"]), 0);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 0);
    assert!(acquire(&mut con, "k", 10_000, &[]).is_some());
}

#[test]
fn expired_leases_leave_no_key_and_free_the_lock() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "k", 20, &[]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(60));
    assert_eq!(fence_of(&mut con, "k"), None);
    assert!(acquire(&mut con, "k", 1_000, &[]).is_some());
}

#[test]
fn fence_with_token_answers_only_the_holder() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(fence_of(&mut con, "k"), None);
    let (token, fence) = acquire(&mut con, "k", 10_000, &[]).unwrap();
    let mine: Option<i64> = cmd("LOCK.FENCE")
        .arg("k")
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert_eq!(mine, Some(fence));
    let theirs: Option<i64> = cmd("LOCK.FENCE")
        .arg("k")
        .arg("nope")
        .query(&mut con)
        .unwrap();
    assert_eq!(theirs, None);
}

#[test]
fn fences_strictly_increase_across_release_expiry_and_deletion() {
    let server = Server::start();
    let mut con = server.connect();
    let mut last = 0;
    for round in 0..30 {
        let (token, fence) = acquire(&mut con, "k", 10_000, &[]).unwrap();
        assert!(fence > last, "round {round}: {fence} <= {last}");
        last = fence;
        match round % 5 {
            0 => assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 1),
            1 => assert_eq!(int(&mut con, &["DEL", "k"]), 1),
            2 => assert_eq!(int(&mut con, &["UNLINK", "k"]), 1),
            3 => {
                let _: () = cmd("FLUSHALL").query(&mut con).unwrap();
            }
            _ => {
                assert_eq!(int(&mut con, &["PEXPIRE", "k", "1"]), 1);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

#[test]
fn ten_thousand_generated_tokens_are_unique() {
    let server = Server::start();
    let mut con = server.connect();
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.cmd("LOCK.ACQUIRE").arg(format!("k{i}")).arg(60_000);
    }
    let grants: Vec<(String, i64)> = pipe.query(&mut con).unwrap();
    let tokens: HashSet<&str> = grants.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tokens.len(), 10_000);
    let fences: HashSet<i64> = grants.iter().map(|(_, f)| *f).collect();
    assert_eq!(fences.len(), 10_000, "fences are node-wide unique");
    assert!(grants.windows(2).all(|w| w[0].1 < w[1].1), "and increasing");
}

#[test]
fn binary_tokens_round_trip() {
    let server = Server::start();
    let mut raw = testkit::resp::RawClient::connect(server.port);
    let token: &[u8] = b"\x00\xff token \r\n";
    let reply = raw.call(&[b"LOCK.ACQUIRE", b"k", b"5000", b"TOKEN", token]);
    let testkit::resp::Reply::Array(Some(items)) = reply else {
        panic!("not an array: {reply:?}")
    };
    assert_eq!(items[0], testkit::resp::Reply::Bulk(Some(token.to_vec())));
    assert_eq!(
        raw.call(&[b"LOCK.RELEASE", b"k", token]),
        testkit::resp::Reply::Integer(1)
    );
}

#[test]
fn memory_usage_and_digest_work_on_lock_keys() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "k", 10_000, &["TOKEN", "t"]).unwrap();
    let usage: i64 = cmd("MEMORY").arg("USAGE").arg("k").query(&mut con).unwrap();
    assert!(usage > 0 && usage < 300, "usage {usage}");
    let digest: String = cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg("k")
        .query::<Vec<String>>(&mut con)
        .unwrap()
        .remove(0);
    assert_ne!(digest, "0".repeat(40));
    let before: String = cmd("DEBUG").arg("DIGEST").query(&mut con).unwrap();
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let after: String = cmd("DEBUG").arg("DIGEST").query(&mut con).unwrap();
    assert_eq!(before, after);
}

#[test]
fn fence_is_readonly_and_commands_have_the_documented_flags() {
    let server = Server::start();
    let mut con = server.connect();
    let info: Value = cmd("COMMAND")
        .arg("INFO")
        .arg("lock.acquire")
        .arg("lock.refresh")
        .arg("lock.release")
        .arg("lock.fence")
        .query(&mut con)
        .unwrap();
    let text = format!("{info:?}");
    for flag in ["write", "fast", "readonly"] {
        assert!(text.contains(flag), "{flag} missing in {text}");
    }
    let flags = |name: &str, con: &mut Connection| -> Vec<String> {
        let info: Vec<Value> = cmd("COMMAND").arg("INFO").arg(name).query(con).unwrap();
        let Value::Array(entry) = &info[0] else {
            panic!("{info:?}")
        };
        let Value::Array(flags) = &entry[2] else {
            panic!("{entry:?}")
        };
        flags
            .iter()
            .map(|f| redis::from_redis_value::<String>(f.clone()).unwrap())
            .collect()
    };
    // Not `denyoom`: under maxmemory a refresh or a holder's retry must still run
    // (tests/spec/out_of_memory.rs); what needs memory is refused by the module.
    // `LOCK.ACQUIRE` may wait (`BLOCK`): `blocking`, as `BLPOP`, and so not `fast`.
    assert_eq!(
        flags("lock.acquire", &mut con),
        ["write", "module", "blocking"]
    );
    assert_eq!(
        flags("lock.acquireall", &mut con),
        ["write", "module", "blocking", "movablekeys"]
    );
    assert_eq!(
        flags("lock.observe", &mut con),
        ["readonly", "module", "blocking"]
    );
    assert_eq!(flags("lock.refresh", &mut con), ["write", "module", "fast"]);
    assert_eq!(flags("lock.release", &mut con), ["write", "module", "fast"]);
    assert_eq!(
        flags("lock.fence", &mut con),
        ["readonly", "module", "fast"]
    );
}

/// Operators check which build a server runs with `MODULE LIST`: its `ver` is the
/// crate's version spelt as Redis modules spell theirs (major·10000 + minor·100 + patch).
#[test]
fn module_list_shows_the_crate_version() {
    let server = Server::start();
    let mut con = server.connect();
    let modules: Vec<Vec<redis::Value>> = cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    let number = |part: &str| part.parse::<i64>().expect("version part");
    let expected = number(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + number(env!("CARGO_PKG_VERSION_PATCH"));
    let ours = modules
        .iter()
        .find(|fields| {
            fields
                .windows(2)
                .any(|pair| pair[1] == redis::Value::BulkString(b"fencelock".to_vec()))
        })
        .expect("fencelock in MODULE LIST");
    let version = ours
        .windows(2)
        .find(|pair| pair[0] == redis::Value::BulkString(b"ver".to_vec()))
        .map(|pair| pair[1].clone());
    assert_eq!(version, Some(redis::Value::Int(expected)), "{ours:?}");
}

/// `COMMAND DOCS` names the release each command came in (the CHANGELOG's), not the
/// running build's version.
#[test]
fn command_docs_name_the_release_each_command_came_in() {
    let server = Server::start();
    let mut con = server.connect();
    let first_release = [
        "lock.acquire",
        "lock.refresh",
        "lock.release",
        "lock.fence",
        "lock.info",
        "lock.apply",
    ];
    let second_release = [
        "lock.drop",
        "lock.guard",
        "lock.fenced",
        "lock.mark",
        "lock.clock",
    ];
    let since = |name: &str, con: &mut Connection| -> String {
        let docs: Vec<Value> = cmd("COMMAND").arg("DOCS").arg(name).query(con).unwrap();
        let Some(Value::Array(fields)) = docs.get(1) else {
            panic!("{name}: {docs:?}")
        };
        fields
            .windows(2)
            .find(|pair| pair[0] == Value::BulkString(b"since".to_vec()))
            .map(|pair| redis::from_redis_value::<String>(pair[1].clone()).unwrap())
            .unwrap_or_else(|| panic!("{name}: no since in {fields:?}"))
    };
    for name in first_release {
        assert_eq!(since(name, &mut con), "0.1.0", "{name}");
    }
    for name in second_release {
        assert_eq!(since(name, &mut con), "0.2.0", "{name}");
    }
    let unreleased = [
        "lock.keepalive",
        "lock.close",
        "lock.held",
        "lock.acquireall",
    ];
    for name in unreleased {
        assert_eq!(since(name, &mut con), "0.3.0", "{name}");
    }
    for name in ["lock.once", "lock.done", "lock.top"] {
        assert_eq!(since(name, &mut con), "0.4.0", "{name}");
    }
}
