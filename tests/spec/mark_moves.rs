//! A fence mark that leaves the data it guards: `RENAME` and `MOVE` take it away from
//! its name as an eviction would, so its fence becomes the mark floor and a stale
//! writer is still refused under the old name; `SWAPDB` moves marks together with the
//! data beside them, and each database keeps refusing what its own mark refuses. A
//! `DEL` (or an overwrite) stays the operator's way to re-open the door. `COPY` of a
//! lock key (a copy would be a second holding of one grant) or of a mark is refused.

use testkit::resp::{RawClient, Reply};
use testkit::*;

fn fenced(raw: &mut RawClient, mark: &str, fence: i64) -> Reply {
    raw.call_str(&[
        "LOCK.FENCED",
        mark,
        &fence.to_string(),
        "SET",
        "ledger",
        "v",
    ])
}

fn stale(highest: i64) -> Reply {
    Reply::Error(format!(
        "STALE fence is below the highest admitted ({highest})"
    ))
}

fn mark_floor(con: &mut Connection) -> i64 {
    info_field(con, "fencelock", "fencelock_mark_floor")
        .and_then(|value| value.parse().ok())
        .expect("fencelock_mark_floor")
}

#[test]
fn a_renamed_or_moved_mark_keeps_refusing_stale_fences_under_its_old_name() {
    for how in [
        &["RENAME", "mark:ledger", "mark:old"][..],
        &["MOVE", "mark:ledger", "1"],
    ] {
        let server = Server::start();
        let mut con = server.connect();
        let mut raw = RawClient::connect(server.port);
        assert!(fenced(&mut raw, "mark:ledger", 100).is_ok());
        assert!(raw.call_str(how).integer() != Some(0), "{how:?}");
        assert_eq!(mark_floor(&mut con), 100, "{how:?}");
        assert_eq!(fenced(&mut raw, "mark:ledger", 50), stale(100), "{how:?}");
        assert!(fenced(&mut raw, "mark:ledger", 100).is_ok(), "{how:?}");
    }
}

#[test]
fn a_renamed_mark_raises_the_floor_on_a_replica_too() {
    let (primary, replica) = primary_and_replica();
    let mut raw = RawClient::connect(primary.port);
    assert!(fenced(&mut raw, "mark:ledger", 100).is_ok());
    assert!(raw.call_str(&["RENAME", "mark:ledger", "mark:old"]).is_ok());
    wait_replicated(&mut primary.connect());
    assert_eq!(mark_floor(&mut replica.connect()), 100);
}

#[test]
fn swapdb_moves_marks_with_their_data_and_delete_still_reopens_the_door() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    assert!(fenced(&mut raw, "mark:ledger", 100).is_ok());
    assert!(raw.call_str(&["SWAPDB", "0", "1"]).is_ok());
    assert_eq!(mark_floor(&mut con), 0, "nothing left its data");
    assert!(raw.call_str(&["SELECT", "1"]).is_ok());
    assert_eq!(fenced(&mut raw, "mark:ledger", 50), stale(100));
    assert_eq!(raw.call_str(&["DEL", "mark:ledger"]).integer(), Some(1));
    assert!(
        fenced(&mut raw, "mark:ledger", 50).is_ok(),
        "DEL re-opens the door"
    );
    assert_eq!(mark_floor(&mut con), 0);
}

#[test]
fn copy_of_a_lock_key_or_a_mark_is_refused() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "lock:a", 60_000, &["TOKEN", "t"]).unwrap();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(
        raw.call_str(&["COPY", "lock:a", "lock:b"]),
        Reply::Error("ERR not supported for this module key".into())
    );
    assert_eq!(int(&mut con, &["EXISTS", "lock:b"]), 0);
    assert!(fenced(&mut raw, "mark:ledger", 100).is_ok());
    assert_eq!(
        raw.call_str(&["COPY", "mark:ledger", "mark:copy"]),
        Reply::Error("ERR not supported for this module key".into())
    );
}
