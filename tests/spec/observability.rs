//! What the server shows of its locks over time: the wait and hold distributions of
//! `INFO fencelock` (Redis's latencystats format, counts and sums, `CONFIG RESETSTAT`)
//! and `LOCK.TOP` (the most waited-for or longest-held keys, no token, ACL-filtered).

use std::thread;
use std::time::Duration;

use testkit::resp::RawClient;
use testkit::*;

use crate::acl::{define_user, login};

/// A field of `INFO fencelock` (`fencelock_` prefixed here).
fn stat(con: &mut Connection, name: &str) -> String {
    info_field(con, "fencelock", &format!("fencelock_{name}"))
        .unwrap_or_else(|| panic!("INFO fencelock has no fencelock_{name}"))
}

fn count(con: &mut Connection, name: &str) -> u64 {
    stat(con, name).parse().expect("an integer field")
}

/// `p50=…,p99=…,p99.9=…` → the three values, in µs.
fn percentiles(con: &mut Connection, name: &str) -> [f64; 3] {
    let text = stat(con, &format!("{name}_percentiles_usec"));
    let parts: Vec<(&str, &str)> = text
        .split(',')
        .map(|part| part.split_once('=').expect("name=value"))
        .collect();
    let names: Vec<&str> = parts.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["p50", "p99", "p99.9"], "{text}");
    for (_, value) in &parts {
        let (_, decimals) = value.split_once('.').expect("three decimals");
        assert_eq!(decimals.len(), 3, "latencystats' format: {text}");
    }
    let value = |i: usize| parts[i].1.parse::<f64>().expect("a number");
    [value(0), value(1), value(2)]
}

/// The value at quantile `q` of `sorted`, as HdrHistogram (and Redis) pick it: the
/// smallest value with at least q of all values at or below it.
fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
    sorted[rank - 1]
}

/// `LOCK.TOP` with `args` → its entries as (key, waiters, longest-wait-ms, held-ms).
fn top(con: &mut Connection, args: &[&str]) -> Vec<(String, i64, i64, i64)> {
    cmd("LOCK.TOP").arg(args).query(con).expect("LOCK.TOP")
}

fn top_keys(con: &mut Connection, args: &[&str]) -> Vec<String> {
    top(con, args).into_iter().map(|entry| entry.0).collect()
}

/// Every string in a reply, however nested.
fn strings_of(reply: &Value) -> Vec<String> {
    match reply {
        Value::BulkString(bytes) => vec![String::from_utf8_lossy(bytes).into_owned()],
        Value::SimpleString(text) => vec![text.clone()],
        Value::Array(items) => items.iter().flat_map(strings_of).collect(),
        Value::Int(n) => vec![n.to_string()],
        _ => Vec::new(),
    }
}

/// Four clients take one lock 2,000 times each with `BLOCK`, each measuring its own
/// waits on the server's clock: `TIME` pipelined just before the acquire gives the
/// wait's start, the grant's fence (the server's µs clock when it granted) its end.
/// The server's percentiles agree with the clients' within the histogram's error
/// (1/128 of the value) plus the few µs between `TIME` and the acquire's own clock
/// read; every acquire is one wait and every holding (released) one holding.
#[test]
fn four_clients_waiting_agree_with_the_server_and_every_wait_and_holding_counts() {
    const CLIENTS: usize = 4;
    const TAKES: usize = 2_000;
    let server = Server::start();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let mut con = server.connect();
            thread::spawn(move || {
                let mut waits = Vec::with_capacity(TAKES);
                for _ in 0..TAKES {
                    let ((seconds, micros), (token, fence)): ((u64, u64), (String, u64)) =
                        redis::pipe()
                            .cmd("TIME")
                            .cmd("LOCK.ACQUIRE")
                            .arg("hot")
                            .arg(60_000)
                            .arg("BLOCK")
                            .arg(0)
                            .query(&mut con)
                            .expect("TIME and a grant");
                    waits.push(fence.saturating_sub(seconds * 1_000_000 + micros));
                    assert_eq!(int(&mut con, &["LOCK.RELEASE", "hot", &token]), 1);
                }
                waits
            })
        })
        .collect();
    let mut waits: Vec<u64> = workers
        .into_iter()
        .flat_map(|worker| worker.join().expect("client thread"))
        .collect();
    waits.sort_unstable();
    let mut con = server.connect();
    let total = (CLIENTS * TAKES) as u64;
    assert_eq!(count(&mut con, "waits"), total, "every acquire with BLOCK");
    assert_eq!(count(&mut con, "holds"), total, "every holding, released");
    assert_eq!(count(&mut con, "block_timeouts"), 0);
    let [p50, p99, _] = percentiles(&mut con, "wait");
    for (server_us, q) in [(p50, 0.50), (p99, 0.99)] {
        // Both measure each wait from its command's start to its grant on the server's
        // clock; they differ by the µs between `TIME` and the acquire (more for the few
        // waits the scheduler paused right there on a busy machine, hence the window
        // of half a percent of the ranks either side), and a histogram bucket is at
        // most 1/128 of its value wide.
        let low = exact_quantile(&waits, q - 0.005) as f64;
        let high = exact_quantile(&waits, q + 0.005) as f64;
        let slack = 10.0;
        assert!(
            server_us >= low / (1.0 + 1.0 / 128.0) - slack
                && server_us <= high * (1.0 + 1.0 / 128.0) + slack,
            "p{}: server {server_us} µs, clients {low}..{high} µs",
            q * 100.0
        );
    }
    let wait_sum = count(&mut con, "wait_usec_sum");
    let client_sum: u64 = waits.iter().sum();
    assert!(wait_sum <= client_sum, "{wait_sum} vs {client_sum}");
    let hold_sum = count(&mut con, "hold_usec_sum");
    assert!(hold_sum > 0);
}

#[test]
fn timeouts_refusals_and_grants_at_once_are_waits_and_every_way_out_ends_a_holding() {
    let server = Server::start();
    let mut con = server.connect();
    // A grant at once, with BLOCK: one wait (of 0 µs); without BLOCK: none.
    let (token, _) = hold(&mut con, "a", 60_000, &["BLOCK", "100"]);
    assert_eq!(count(&mut con, "waits"), 1);
    assert!(acquire(&mut con, "a", 60_000, &[]).is_none());
    assert_eq!(count(&mut con, "waits"), 1, "no BLOCK, no wait");
    // A wait that times out.
    assert!(acquire(&mut con, "a", 60_000, &["BLOCK", "20"]).is_none());
    assert_eq!(count(&mut con, "waits"), 2);
    assert_eq!(count(&mut con, "holds"), 0);
    // Released, expired, deleted: each ends one holding. Renamed: still held.
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "a", &token]), 1);
    assert_eq!(count(&mut con, "holds"), 1);
    hold(&mut con, "b", 60_000, &[]);
    let _: () = cmd("RENAME").arg("b").arg("b2").query(&mut con).unwrap();
    assert_eq!(count(&mut con, "holds"), 1, "a renamed lock is still held");
    let _: i64 = cmd("DEL").arg("b2").query(&mut con).unwrap();
    assert_eq!(count(&mut con, "holds"), 2);
    hold(&mut con, "c", 1, &[]);
    eventually(Duration::from_secs(5), "the lease expired", || {
        let _: bool = cmd("EXISTS").arg("c").query(&mut con).unwrap();
        count(&mut con, "holds") == 3
    });
    // Three shared holders, each leaving its own way: one hold each.
    let r1 = hold(&mut con, "s", 60_000, &["SHARED"]).0;
    hold(&mut con, "s", 60_000, &["SHARED"]);
    hold(&mut con, "s", 60_000, &["SHARED"]);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "s", &r1]), 1);
    assert_eq!(count(&mut con, "holds"), 4);
    let _: i64 = cmd("DEL").arg("s").query(&mut con).unwrap();
    assert_eq!(count(&mut con, "holds"), 6);
    // An all-or-none acquire of three keys: one wait, three holdings.
    let (token, _) = cmd("LOCK.ACQUIREALL")
        .arg(3)
        .arg(&["x", "y", "z"][..])
        .arg(60_000)
        .arg(&["BLOCK", "100"][..])
        .query::<(String, Vec<i64>)>(&mut con)
        .expect("granted");
    assert_eq!(count(&mut con, "waits"), 3);
    for key in ["x", "y", "z"] {
        assert_eq!(int(&mut con, &["LOCK.RELEASE", key, &token]), 1);
    }
    assert_eq!(count(&mut con, "holds"), 9);
}

#[test]
fn config_resetstat_resets_the_distributions_and_counters_but_not_for_a_refused_user() {
    let server = Server::start();
    let mut con = server.connect();
    let (token, _) = hold(&mut con, "k", 60_000, &["BLOCK", "10"]);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 1);
    hold(&mut con, "held", 60_000, &[]);
    assert_eq!(count(&mut con, "waits"), 1);
    assert_eq!(count(&mut con, "holds"), 1);
    // A user the ACL refuses CONFIG: its RESETSTAT resets nothing.
    define_user(&server, "viewer", &["~*", "+@all", "-config"]);
    let mut viewer = login(&server, "viewer");
    let refused: redis::RedisResult<()> = cmd("CONFIG").arg("RESETSTAT").query(&mut viewer);
    assert_eq!(refused.unwrap_err().code(), Some("NOPERM"));
    let _: String = cmd("PING").query(&mut con).unwrap();
    assert_eq!(count(&mut con, "waits"), 1);
    assert_eq!(count(&mut con, "acquired"), 2);
    let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
    for name in [
        "waits",
        "holds",
        "wait_usec_sum",
        "hold_usec_sum",
        "acquired",
        "released",
    ] {
        assert_eq!(count(&mut con, name), 0, "{name}");
    }
    assert_eq!(percentiles(&mut con, "wait"), [0.0; 3]);
    assert_eq!(percentiles(&mut con, "hold"), [0.0; 3]);
    // Gauges say what is, not what was.
    assert_eq!(count(&mut con, "held_locks"), 1);
    assert!(count(&mut con, "fence_clock") > 0);
}

/// Every `CONFIG RESETSTAT` the server runs resets the module's figures too, however
/// the statistics it sets back grow again in the same turn of the event loop: a reset
/// after one where only leases ran out (no command between), a reset followed in one
/// write by more commands than had run since the previous reset, and one inside a
/// `MULTI` followed by 500 commands.
#[test]
fn every_config_resetstat_the_server_runs_resets_the_modules_figures() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    // Two resets with only expiries between them.
    for key in ["a", "b"] {
        assert!(raw
            .call_str(&["LOCK.ACQUIRE", key, "100"])
            .grant()
            .is_some());
    }
    assert!(raw.call_str(&["CONFIG", "RESETSTAT"]).is_ok());
    eventually(Duration::from_secs(10), "both leases ran out", || {
        count(&mut con, "expired") == 2
    });
    assert!(raw.call_str(&["CONFIG", "RESETSTAT"]).is_ok());
    assert_eq!(count(&mut con, "expired"), 0);
    assert_eq!(count(&mut con, "holds"), 0);
    // More commands after the reset, in the same write, than before it.
    for i in 0..50 {
        let key = format!("k{i}");
        assert!(raw
            .call_str(&["LOCK.ACQUIRE", &key, "60000"])
            .grant()
            .is_some());
    }
    let mut burst: Vec<&[&str]> = vec![&["CONFIG", "RESETSTAT"]];
    burst.extend(std::iter::repeat_n(&["PING"][..], 500));
    raw.send_pipeline(&burst);
    for _ in 0..burst.len() {
        raw.read_reply();
    }
    assert_eq!(count(&mut con, "acquired"), 0, "a reset before 500 PINGs");
    // The same inside a transaction.
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "t", "60000"])
        .grant()
        .is_some());
    let mut transaction: Vec<&[&str]> = vec![&["MULTI"], &["CONFIG", "RESETSTAT"]];
    transaction.extend(std::iter::repeat_n(&["PING"][..], 500));
    transaction.push(&["EXEC"]);
    raw.send_pipeline(&transaction);
    for _ in 0..transaction.len() {
        raw.read_reply();
    }
    assert_eq!(
        count(&mut con, "acquired"),
        0,
        "a reset in a MULTI of 500 PINGs"
    );
}

/// A `CONFIG RESETSTAT` the server did not run resets nothing: queued in a `MULTI` that
/// is discarded, or whose `EXEC` fails, each sent in one write (so the event loop looks
/// right after it), and after an earlier real reset left the server's count of
/// connections at 0 (what the module once took for a reset). One that `EXEC` runs,
/// in one write too, resets the module's figures with the server's.
#[test]
fn a_config_resetstat_in_a_transaction_that_does_not_run_resets_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    assert!(raw.call_str(&["CONFIG", "RESETSTAT"]).is_ok());
    assert!(raw
        .call_str(&["LOCK.ACQUIRE", "k", "60000"])
        .grant()
        .is_some());
    assert_eq!(count(&mut con, "acquired"), 1);
    assert_eq!(count(&mut con, "holds"), 0);
    let discarded: &[&[&str]] = &[&["MULTI"], &["CONFIG", "RESETSTAT"], &["DISCARD"]];
    let failed: &[&[&str]] = &[
        &["MULTI"],
        &["CONFIG", "RESETSTAT"],
        &["LOCK.ACQUIRE"],
        &["EXEC"],
    ];
    for transaction in [discarded, failed] {
        raw.send_pipeline(transaction);
        for _ in transaction.iter() {
            raw.read_reply();
        }
        let processed: u64 = info_field(&mut con, "stats", "total_commands_processed")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(processed > 2, "the server's statistics were not reset");
        assert_eq!(count(&mut con, "acquired"), 1, "{transaction:?}");
    }
    raw.send_pipeline(&[&["MULTI"], &["CONFIG", "RESETSTAT"], &["EXEC"]]);
    for _ in 0..3 {
        raw.read_reply();
    }
    assert_eq!(count(&mut con, "acquired"), 0);
}

/// The server's clock in ms (`TIME`).
fn server_ms(con: &mut Connection) -> i64 {
    let (seconds, micros): (i64, i64) = cmd("TIME").query(con).unwrap();
    seconds * 1_000 + micros / 1_000
}

/// A lease that ran out is a holding until its lease's end, not until Redis got round
/// to deleting its key: with the expiry cycle off, the key stays 400 ms past its
/// lease, and the holding still counts 100 ms — its lease as last refreshed (the
/// refresh, pipelined with the grant, cut a 60 s lease to 100 ms), exclusive or shared.
#[test]
fn a_lease_that_ran_out_is_measured_to_its_end_not_to_the_keys_deletion() {
    let server = Server::start();
    let mut con = server.connect();
    without_active_expiry(&mut con);
    for (key, mode) in [("solo", &[][..]), ("shared", &["SHARED"][..])] {
        let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
        let token = format!("token-{key}");
        let mut pipe = redis::pipe();
        pipe.cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(60_000)
            .arg("TOKEN")
            .arg(&token)
            .arg(mode);
        pipe.cmd("LOCK.REFRESH").arg(key).arg(&token).arg(100);
        let ((_, fence), refreshed): ((String, i64), i64) = pipe.query(&mut con).unwrap();
        assert_eq!(refreshed, 1);
        eventually(
            Duration::from_secs(30),
            "the key outlived its lease",
            || server_ms(&mut con) > fence_ms(fence) + 500,
        );
        // The read expires the key.
        let _: bool = cmd("EXISTS").arg(key).query(&mut con).unwrap();
        assert_eq!(count(&mut con, "holds"), 1, "{key}");
        let held_us = count(&mut con, "hold_usec_sum");
        // 100 ms, plus the moment between the grant and the refresh (pipelined; a
        // measure to the deletion would be 500 ms or more).
        assert!(
            (99_000..250_000).contains(&held_us),
            "{key}: held {held_us} µs"
        );
    }
}

/// Fences come from the clock only while the fence clock is not ahead of it: after a
/// jump ahead (here `LOCK.CLOCK`, as a fence loaded or replicated from a server whose
/// clock runs ahead would make it), a holding still shows its age in `LOCK.TOP` and
/// counts its length in the hold histogram.
#[test]
fn after_the_fence_clock_jumps_ahead_a_holdings_age_and_length_still_count() {
    let server = Server::start();
    let mut con = server.connect();
    let hour_ahead_us = (server_ms(&mut con) + 3_600_000) * 1_000;
    let _: () = cmd("LOCK.CLOCK")
        .arg(hour_ahead_us)
        .arg(0)
        .query(&mut con)
        .unwrap();
    let (token, fence) = hold(&mut con, "ahead", 60_000, &[]);
    assert!(fence > hour_ahead_us, "the fence follows the clock ahead");
    let (shared_token, _) = hold(&mut con, "ahead-shared", 60_000, &["SHARED"]);
    // Read after both grants: on a loaded machine a grant can come well after a time
    // read before it, and 300 ms from that time would be less than 300 ms of holding.
    let granted_ms = server_ms(&mut con);
    eventually(Duration::from_secs(30), "300 ms went by", || {
        server_ms(&mut con) > granted_ms + 300
    });
    for (key, held_ms) in top(&mut con, &["BY", "held"])
        .into_iter()
        .map(|entry| (entry.0, entry.3))
    {
        assert!(held_ms >= 300, "{key} held {held_ms} ms");
    }
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "ahead", &token]), 1);
    assert_eq!(
        int(&mut con, &["LOCK.RELEASE", "ahead-shared", &shared_token]),
        1
    );
    assert_eq!(count(&mut con, "holds"), 2);
    // Each counts its 300 ms and more, the shared holder too (its start is kept by its
    // fence, as an exclusive holding's).
    assert!(count(&mut con, "hold_usec_sum") >= 600_000);
}

/// Sets the fence clock an hour ahead of the server's (as a fence loaded or replicated
/// from a server whose clock runs ahead would).
fn fence_clock_an_hour_ahead(con: &mut Connection) -> i64 {
    let hour_ahead_us = (server_ms(con) + 3_600_000) * 1_000;
    let _: () = cmd("LOCK.CLOCK")
        .arg(hour_ahead_us)
        .arg(0)
        .query(con)
        .unwrap();
    hour_ahead_us
}

/// Each `(key, held ms)` of `LOCK.TOP BY held` of the selected database.
fn held_ms(con: &mut Connection) -> Vec<(String, i64)> {
    top(con, &["BY", "held", "COUNT", "100"])
        .into_iter()
        .map(|entry| (entry.0, entry.3))
        .collect()
}

/// With the fence clock ahead, a held lock renamed, moved to another database or
/// restored over itself (`RESTORE … REPLACE`) is the same holding: its age in
/// `LOCK.TOP` and its length in the hold histogram count from its grant, not from the
/// move.
#[test]
fn a_lock_renamed_moved_or_restored_over_itself_keeps_its_age_with_the_fence_clock_ahead() {
    let server = Server::start();
    let mut con = server.connect();
    fence_clock_an_hour_ahead(&mut con);
    let (renamed, _) = hold(&mut con, "to-rename", 60_000, &[]);
    let (moved, _) = hold(&mut con, "moved", 60_000, &[]);
    let (restored, _) = hold(&mut con, "restored", 60_000, &["SHARED"]);
    // Read after the grants (a loaded machine may grant well after a time read before).
    let granted_ms = server_ms(&mut con);
    eventually(Duration::from_secs(30), "300 ms went by", || {
        server_ms(&mut con) > granted_ms + 300
    });
    let _: () = cmd("RENAME")
        .arg("to-rename")
        .arg("renamed")
        .query(&mut con)
        .unwrap();
    let moved_away: bool = cmd("MOVE").arg("moved").arg(1).query(&mut con).unwrap();
    assert!(moved_away);
    let payload: Vec<u8> = cmd("DUMP").arg("restored").query(&mut con).unwrap();
    let pttl: i64 = cmd("PTTL").arg("restored").query(&mut con).unwrap();
    let _: () = cmd("RESTORE")
        .arg("restored")
        .arg(pttl)
        .arg(payload)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
    let mut listed = held_ms(&mut con);
    let _: () = cmd("SELECT").arg(1).query(&mut con).unwrap();
    listed.extend(held_ms(&mut con));
    listed.sort();
    let keys: Vec<&str> = listed.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["moved", "renamed", "restored"]);
    for (key, held_ms) in &listed {
        assert!(*held_ms >= 300, "{key} held {held_ms} ms");
    }
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "moved", &moved]), 1);
    let _: () = cmd("SELECT").arg(0).query(&mut con).unwrap();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "renamed", &renamed]), 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "restored", &restored]), 1);
    assert_eq!(count(&mut con, "holds"), 3);
    assert!(count(&mut con, "hold_usec_sum") >= 900_000);
}

/// Locks loaded (here `DEBUG RELOAD`) while the fence clock is ahead of the wall clock
/// have fences that say nothing of their start: they count from the load, so their
/// age in `LOCK.TOP` and their length grow from there (not 0 until the clock catches
/// up an hour later).
#[test]
fn locks_loaded_while_the_fence_clock_is_ahead_count_from_the_load() {
    let server = Server::start();
    let mut con = server.connect();
    fence_clock_an_hour_ahead(&mut con);
    let (solo, _) = hold(&mut con, "solo", 60_000, &[]);
    let (shared, _) = hold(&mut con, "shared", 60_000, &["SHARED"]);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let loaded_ms = server_ms(&mut con);
    eventually(Duration::from_secs(30), "300 ms went by", || {
        server_ms(&mut con) > loaded_ms + 300
    });
    let listed = held_ms(&mut con);
    assert_eq!(listed.len(), 2, "{listed:?}");
    for (key, held_ms) in &listed {
        assert!(*held_ms >= 300, "{key} held {held_ms} ms");
    }
    let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "solo", &solo]), 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "shared", &shared]), 1);
    assert_eq!(count(&mut con, "holds"), 2);
    assert!(count(&mut con, "hold_usec_sum") >= 600_000);
}

/// Oldest first across a jump of the fence clock: a lock granted before the jump (its
/// fence its start), then two after (fences an hour ahead, their starts kept apart) are
/// listed `BY held` in the order of their grants, and `COUNT 1` is the oldest live one
/// whichever kind it is.
#[test]
fn lock_top_by_held_lists_the_oldest_first_across_a_jump_of_the_fence_clock() {
    let server = Server::start();
    let mut con = server.connect();
    let grant_apart = |con: &mut Connection, key: &str| {
        let (token, _) = hold(con, key, 60_000, &[]);
        let granted_ms = server_ms(con);
        eventually(
            Duration::from_secs(30),
            "the server's clock moved on",
            || server_ms(con) > granted_ms + 5,
        );
        token
    };
    let before = grant_apart(&mut con, "before");
    fence_clock_an_hour_ahead(&mut con);
    let first = grant_apart(&mut con, "after-1");
    grant_apart(&mut con, "after-2");
    assert_eq!(
        top_keys(&mut con, &["BY", "held"]),
        ["before", "after-1", "after-2"]
    );
    let oldest = &["BY", "held", "COUNT", "1"];
    assert_eq!(top_keys(&mut con, oldest), ["before"]);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "before", &before]), 1);
    assert_eq!(top_keys(&mut con, oldest), ["after-1"]);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "after-1", &first]), 1);
    assert_eq!(top_keys(&mut con, oldest), ["after-2"]);
}

/// `RESTORE` of a held lock's `DUMP` makes a copy with the same fence: with the fence
/// clock ahead, the copy going (here `DEL`) leaves the original its place, first in
/// `COUNT n` as in the whole listing. Before, the original dropped out of `COUNT n`.
#[test]
fn a_copy_going_leaves_the_original_first_with_the_fence_clock_ahead() {
    let server = Server::start();
    let mut con = server.connect();
    fence_clock_an_hour_ahead(&mut con);
    hold(&mut con, "original", 60_000, &[]);
    let granted_ms = server_ms(&mut con);
    eventually(
        Duration::from_secs(30),
        "the server's clock moved on",
        || server_ms(&mut con) > granted_ms + 5,
    );
    for i in 0..5 {
        hold(&mut con, &format!("later-{i}"), 60_000, &[]);
    }
    let dump = dump(&mut con, "original");
    restore(&mut con, "copy", &dump);
    assert_eq!(int(&mut con, &["DEL", "copy"]), 1);
    assert_eq!(top_keys(&mut con, &["BY", "held"])[0], "original");
    assert_eq!(
        top_keys(&mut con, &["BY", "held", "COUNT", "3"]),
        ["original", "later-0", "later-1"]
    );
}

/// With the fence clock ahead, a copy of a held lock in another database going, then
/// enough holdings coming and going there to drop the starts nobody carries, leaves
/// the original its age (in `LOCK.TOP`) and its length (in the hold histogram). Before,
/// the original showed 0 ms for good and its holding counted 0 µs.
#[test]
fn a_copy_going_in_another_database_leaves_the_original_its_age() {
    let server = Server::start();
    let mut con = server.connect();
    fence_clock_an_hour_ahead(&mut con);
    let (token, _) = hold(&mut con, "original", 60_000, &[]);
    let granted_ms = server_ms(&mut con);
    let dump = dump(&mut con, "original");
    let mut other = server.connect();
    let _: () = cmd("SELECT").arg(1).query(&mut other).unwrap();
    restore(&mut other, "copy", &dump);
    assert_eq!(int(&mut other, &["DEL", "copy"]), 1);
    for i in 0..200 {
        let key = format!("churn-{i}");
        let (churn, _) = hold(&mut other, &key, 60_000, &[]);
        assert_eq!(int(&mut other, &["LOCK.RELEASE", &key, &churn]), 1);
    }
    eventually(Duration::from_secs(30), "300 ms went by", || {
        server_ms(&mut con) > granted_ms + 300
    });
    let listed = held_ms(&mut con);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].1 >= 300, "{listed:?}");
    let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "original", &token]), 1);
    assert!(count(&mut con, "hold_usec_sum") >= 300_000);
}

/// Five waiters on one key and one on another: `LOCK.TOP COUNT 3` lists the first key
/// first with 5, then the other with 1, then a held key nobody waits for; no token in
/// any reply (holders' and waiters' chosen ones included).
#[test]
fn lock_top_lists_the_most_waited_for_first_and_never_a_token() {
    let server = Server::start();
    let mut con = server.connect();
    let (idle_token, idle_fence) = hold(&mut con, "idle", 60_000, &["TOKEN", "secret-idle"]);
    // `idle` is held at least 2 ms longer than the others (by the server's clock).
    eventually(
        Duration::from_secs(5),
        "the server's clock moved on",
        || {
            let (seconds, micros): (i64, i64) = cmd("TIME").query(&mut con).unwrap();
            seconds * 1_000 + micros / 1_000 > fence_ms(idle_fence) + 2
        },
    );
    hold(&mut con, "hot", 60_000, &["TOKEN", "secret-hot"]);
    hold(&mut con, "warm", 60_000, &["TOKEN", "secret-warm"]);
    let mut waiters = Vec::new();
    for i in 0..5 {
        let mut waiter = RawClient::connect(server.port);
        let token = format!("secret-waiter-{i}");
        waiter.send_pipeline(&[&[
            "LOCK.ACQUIRE",
            "hot",
            "60000",
            "BLOCK",
            "0",
            "TOKEN",
            &token,
        ]]);
        waiters.push(waiter);
    }
    let mut warm_waiter = RawClient::connect(server.port);
    warm_waiter.send_pipeline(&[&["LOCK.ACQUIRE", "warm", "60000", "BLOCK", "0"]]);
    wait_for_waiters(&mut con, "hot", 5);
    wait_for_waiters(&mut con, "warm", 1);
    let entries = top(&mut con, &["COUNT", "3"]);
    let summary: Vec<(&str, i64)> = entries.iter().map(|e| (e.0.as_str(), e.1)).collect();
    assert_eq!(summary, [("hot", 5), ("warm", 1), ("idle", 0)]);
    assert_eq!(entries[2].2, 0, "nobody waits for idle");
    assert!(entries.iter().all(|e| e.2 >= 0 && e.3 >= 0));
    assert_eq!(top_keys(&mut con, &["COUNT", "1"]), ["hot"]);
    assert_eq!(top(&mut con, &[]).len(), 3, "default COUNT 10");
    let by_held = top_keys(&mut con, &["BY", "held"]);
    assert_eq!(by_held[0], "idle", "the longest held first");
    // Every string of the replies: no token anywhere.
    for args in [&[][..], &["BY", "HELD", "COUNT", "100"]] {
        let reply: Value = cmd("LOCK.TOP").arg(args).query(&mut con).unwrap();
        let text = strings_of(&reply).join(" ");
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("hot"), "{text}");
    }
    // Released, `idle` leaves the list.
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "idle", &idle_token]), 1);
    assert!(!top_keys(&mut con, &[]).contains(&"idle".to_string()));
}

/// Any `COUNT` lists the first entries of the whole listing, in either order: the keys
/// `LOCK.TOP` looks at for a short listing (the longest held by their index entry)
/// include every key that belongs in it, also where a shared lock's oldest holder left
/// (its index entry then older than its holding) and where waiters come first.
#[test]
fn lock_top_with_any_count_lists_the_start_of_the_whole_listing() {
    let server = Server::start();
    let mut con = server.connect();
    let mut leaving = Vec::new();
    for i in 0..24 {
        let key = format!("k{:02}", (i * 7) % 24);
        if i % 3 == 0 {
            let (first, _) = hold(&mut con, &key, 60_000, &["SHARED"]);
            leaving.push((key.clone(), first));
        }
        hold(&mut con, &key, 60_000, &["SHARED"]);
        if i % 5 == 0 {
            thread::sleep(Duration::from_millis(3));
        }
    }
    for (key, token) in &leaving {
        assert_eq!(int(&mut con, &["LOCK.RELEASE", key, token]), 1);
    }
    let (_, _) = hold(&mut con, "waited", 60_000, &[]);
    let mut waiter = RawClient::connect(server.port);
    waiter.send_pipeline(&[&["LOCK.ACQUIRE", "waited", "60000", "BLOCK", "0"]]);
    wait_for_waiters(&mut con, "waited", 1);
    for by in ["waiters", "held"] {
        let whole = top(&mut con, &["COUNT", "100", "BY", by]);
        assert_eq!(whole.len(), 25);
        for count in 1..=25 {
            let listed = top(&mut con, &["COUNT", &count.to_string(), "BY", by]);
            let keys = |entries: &[(String, i64, i64, i64)]| -> Vec<String> {
                entries.iter().map(|entry| entry.0.clone()).collect()
            };
            assert_eq!(
                keys(&listed),
                keys(&whole[..count]),
                "BY {by} COUNT {count}"
            );
        }
    }
}

/// `SWAPDB` of a database with itself changes nothing, `LOCK.TOP`'s held keys included;
/// a swap of two databases moves them.
#[test]
fn lock_top_keeps_its_held_keys_through_a_swapdb_of_a_database_with_itself() {
    let server = Server::start();
    let mut con = server.connect();
    for key in ["a", "b"] {
        hold(&mut con, key, 60_000, &[]);
    }
    let _: () = cmd("SWAPDB").arg(0).arg(0).query(&mut con).unwrap();
    let mut held = top_keys(&mut con, &[]);
    held.sort();
    assert_eq!(held, ["a", "b"]);
    let _: () = cmd("SWAPDB").arg(0).arg(1).query(&mut con).unwrap();
    assert!(top_keys(&mut con, &[]).is_empty());
    let _: () = cmd("SELECT").arg(1).query(&mut con).unwrap();
    let mut moved = top_keys(&mut con, &[]);
    moved.sort();
    assert_eq!(moved, ["a", "b"]);
}

/// `fencelock.track-held-keys no`: no index of held keys, so `LOCK.TOP` lists only the
/// keys clients wait for; switched on again, a key is listed from its next grant.
#[test]
fn without_the_held_key_index_lock_top_lists_the_keys_waited_for() {
    let server = Server::start();
    let mut con = server.connect();
    config_set(&mut con, "fencelock.track-held-keys", "no").unwrap();
    hold(&mut con, "quiet", 60_000, &[]);
    hold(&mut con, "busy", 60_000, &[]);
    let mut waiter = RawClient::connect(server.port);
    waiter.send_pipeline(&[&["LOCK.ACQUIRE", "busy", "60000", "BLOCK", "0"]]);
    eventually(Duration::from_secs(30), "the waiter queued", || {
        waiters(&mut con, "busy") == 1
    });
    assert_eq!(top_keys(&mut con, &["BY", "held"]), ["busy"]);
    config_set(&mut con, "fencelock.track-held-keys", "yes").unwrap();
    hold(&mut con, "later", 60_000, &[]);
    let mut listed = top_keys(&mut con, &["BY", "held"]);
    listed.sort();
    assert_eq!(listed, ["busy", "later"]);
}

/// A user sees only the keys it may read (run `LOCK.INFO` on); keys it may only write
/// are left out.
#[test]
fn lock_top_leaves_out_keys_the_user_may_not_read() {
    let server = Server::start();
    let mut con = server.connect();
    for key in ["app:a", "secret:b", "writeonly:c"] {
        hold(&mut con, key, 60_000, &[]);
    }
    define_user(
        &server,
        "viewer",
        &[
            "resetkeys",
            "~app:*",
            "%W~writeonly:*",
            "-@all",
            "+lock.top",
            "+lock.info",
        ],
    );
    let mut viewer = login(&server, "viewer");
    assert_eq!(top_keys(&mut viewer, &[]), ["app:a"]);
    let mut everything = top_keys(&mut con, &[]);
    everything.sort();
    assert_eq!(everything, ["app:a", "secret:b", "writeonly:c"]);
}

/// A key pattern in a selector that grants no command lets the user read nothing there
/// (`~app:* (~secret:*)`): `LOCK.TOP` leaves those keys out, as Redis would refuse any
/// read of them; nor does it show a key to a user who may not run `LOCK.INFO` at all.
#[test]
fn lock_top_judges_a_key_by_the_selector_that_grants_the_read() {
    let server = Server::start();
    let mut con = server.connect();
    for key in ["app:a", "secret:b"] {
        hold(&mut con, key, 60_000, &[]);
    }
    define_user(
        &server,
        "viewer",
        &[
            "resetkeys",
            "~app:*",
            "-@all",
            "+lock.top",
            "+lock.info",
            "(~secret:*)",
        ],
    );
    define_user(&server, "blind", &["~*", "-@all", "+lock.top"]);
    let mut viewer = login(&server, "viewer");
    let refused: redis::RedisResult<Value> = cmd("LOCK.INFO").arg("secret:b").query(&mut viewer);
    assert_eq!(refused.unwrap_err().code(), Some("NOPERM"));
    assert_eq!(top_keys(&mut viewer, &[]), ["app:a"]);
    let mut blind = login(&server, "blind");
    assert!(top_keys(&mut blind, &[]).is_empty());
}

#[test]
fn lock_top_refuses_bad_arguments_in_redis_wording() {
    let server = Server::start();
    let mut con = server.connect();
    let error = |con: &mut Connection, args: &[&str]| -> String {
        let reply: redis::RedisResult<Value> = cmd("LOCK.TOP").arg(args).query(con);
        let error = reply.expect_err("refused");
        format!(
            "{} {}",
            error.code().unwrap_or("?"),
            error.detail().unwrap_or("")
        )
    };
    let not_positive = "ERR value is out of range, must be positive";
    let not_integer = "ERR value is not an integer or out of range";
    for (args, expected) in [
        (&["COUNT", "0"][..], not_positive),
        (&["COUNT", "-1"], not_positive),
        (&["COUNT", "ten"], not_integer),
        (&["COUNT", "1.5"], not_integer),
        (&["COUNT"], "ERR syntax error"),
        (&["BY", "fence"], "ERR syntax error"),
        (&["BY"], "ERR syntax error"),
        (&["COUNT", "1", "COUNT", "2"], "ERR syntax error"),
        (&["LIMIT", "1"], "ERR syntax error"),
    ] {
        assert_eq!(error(&mut con, args), expected, "{args:?}");
    }
    assert_eq!(top(&mut con, &["count", "5", "by", "WAITERS"]), []);
}
