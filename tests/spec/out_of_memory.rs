//! Under `maxmemory` with `noeviction` (OOM), what keeps a lock must still run, as
//! `PEXPIRE` or a Lua refresh would: `LOCK.REFRESH` (also `ADD`), the holder's own
//! same-token retry, a release; fenced *reads*; and a stale fence is answered `STALE`.
//! What needs new memory (a new grant, a new waiter, a fenced write) is refused with
//! Redis's OOM error, and nothing changes.

use testkit::resp::{RawClient, Reply};
use testkit::*;

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

fn set(raw: &mut RawClient, name: &str, value: &str) {
    assert!(raw.call_str(&["CONFIG", "SET", name, value]).is_ok());
}

#[test]
fn what_keeps_a_lock_runs_under_oom_and_what_needs_memory_is_refused() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    for (key, token) in [("lock:x", "t"), ("lock:s", "r1")] {
        let mut argv = vec!["LOCK.ACQUIRE", key, "1000", "TOKEN", token];
        if key == "lock:s" {
            argv.push("SHARED");
        }
        assert!(raw.call_str(&argv).grant().is_some());
    }
    assert!(raw.call_str(&["LOCK.MARK", "mark", "100"]).is_ok());
    assert!(raw.call_str(&["SET", "data", "1"]).is_ok());
    let fence_before = raw.call_str(&["LOCK.FENCE", "lock:x"]);
    set(&mut raw, "maxmemory-policy", "noeviction");
    set(&mut raw, "maxmemory", "1");

    // Keeping what is held.
    assert_eq!(
        raw.call_str(&["LOCK.REFRESH", "lock:x", "t", "60000"]),
        Reply::Integer(1)
    );
    assert_eq!(
        raw.call_str(&["LOCK.REFRESH", "lock:x", "t", "1000", "ADD"]),
        Reply::Integer(1)
    );
    assert_eq!(
        raw.call_str(&["LOCK.REFRESH", "lock:s", "r1", "60000"]),
        Reply::Integer(1)
    );
    let retried = raw.call_str(&["LOCK.ACQUIRE", "lock:x", "60000", "TOKEN", "t"]);
    assert_eq!(
        retried.grant().map(|(_, fence)| Reply::Integer(fence)),
        Some(fence_before.clone())
    );
    // Reads through a mark, and a stale fence, answer as without maxmemory.
    assert_eq!(
        raw.call_str(&["LOCK.FENCED", "mark", "100", "GET", "data"]),
        Reply::Bulk(Some(b"1".to_vec()))
    );
    assert_eq!(
        raw.call_str(&["LOCK.FENCED", "mark", "50", "GET", "data"]),
        Reply::Error("STALE fence is below the highest admitted (100)".into())
    );
    assert_eq!(
        raw.call_str(&["LOCK.FENCED", "mark", "50", "SET", "data", "2"]),
        Reply::Error("STALE fence is below the highest admitted (100)".into())
    );

    // What needs memory is refused, and changes nothing.
    for argv in [
        vec!["LOCK.ACQUIRE", "lock:new", "1000"],
        vec!["LOCK.ACQUIRE", "lock:s", "1000", "SHARED", "TOKEN", "r2"],
        vec![
            "LOCK.ACQUIRE",
            "lock:x",
            "1000",
            "TOKEN",
            "other",
            "BLOCK",
            "100",
        ],
    ] {
        assert_eq!(raw.call_str(&argv), Reply::Error(OOM.into()), "{argv:?}");
    }
    let write = raw.call_str(&["LOCK.FENCED", "mark", "200", "SET", "data", "3"]);
    assert!(
        matches!(&write, Reply::Error(e) if e.starts_with("OOM")),
        "{write:?}"
    );

    set(&mut raw, "maxmemory", "0");
    assert_eq!(raw.call_str(&["EXISTS", "lock:new"]), Reply::Integer(0));
    assert_eq!(
        raw.call_str(&["GET", "data"]),
        Reply::Bulk(Some(b"1".to_vec()))
    );
    assert_eq!(
        raw.call_str(&["LOCK.FENCED", "mark", "150", "GET", "data"]),
        Reply::Bulk(Some(b"1".to_vec())),
        "the refused write did not raise the mark to 200"
    );
    let pttl = raw.call_str(&["PTTL", "lock:x"]).integer().unwrap_or(0);
    assert!(pttl > 50_000, "the refreshes held: {pttl}");
    assert_eq!(
        raw.call_str(&["LOCK.RELEASE", "lock:x", "t"]),
        Reply::Integer(1)
    );
}
