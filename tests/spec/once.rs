//! Run once (`LOCK.ONCE`, `LOCK.DONE`): one run per key, every duplicate answered with
//! its result (at once when done, at `DONE` when it waited), a run given up handed to
//! exactly one waiting duplicate under a higher fence, fingerprints refused while
//! running and while done, the result bound, and what the mutex commands do with a
//! running claim and a done record.

use std::thread::JoinHandle;
use std::time::Duration;

use testkit::resp::Reply;
use testkit::*;

/// What a claim was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Claim {
    Run { token: String, fence: i64 },
    Replay { fence: i64, result: String },
    Busy,
}

fn claim(con: &mut Connection, key: &str, ttl: i64, keep: i64, extra: &[&str]) -> Claim {
    as_claim(once_claim(con, key, ttl, keep, extra))
}

fn as_claim(reply: Value) -> Claim {
    match reply {
        Value::Nil => Claim::Busy,
        Value::Array(items) => match items.as_slice() {
            [Value::BulkString(token), Value::Int(fence)] => Claim::Run {
                token: String::from_utf8(token.clone()).unwrap(),
                fence: *fence,
            },
            [Value::Nil, Value::Int(fence), Value::BulkString(result)] => Claim::Replay {
                fence: *fence,
                result: String::from_utf8(result.clone()).unwrap(),
            },
            other => panic!("unexpected claim reply {other:?}"),
        },
        other => panic!("unexpected claim reply {other:?}"),
    }
}

fn done(con: &mut Connection, key: &str, token: &str, result: &str) -> i64 {
    int(con, &["LOCK.DONE", key, token, result])
}

fn error_of(con: &mut Connection, args: &[&str]) -> String {
    let (name, rest) = args.split_first().unwrap();
    let error = cmd(name).arg(rest).query::<Value>(con).unwrap_err();
    format!(
        "{} {}",
        error.code().unwrap_or_default(),
        error.detail().unwrap_or_default()
    )
}

/// `n` duplicates claiming `key` with `BLOCK block_ms`, each on its own connection and
/// thread, all connected before any claims; the one granted the run calls `on_run` with
/// its connection, token and fence (the work, and its `DONE` if any). Join each for its
/// reply.
fn waiting_claims(
    server: &Server,
    key: &str,
    n: usize,
    block_ms: i64,
    on_run: impl Fn(&mut Connection, &str, i64) + Send + Clone + 'static,
) -> Vec<JoinHandle<Claim>> {
    let block = block_ms.to_string();
    let connections: Vec<Connection> = (0..n).map(|_| server.connect()).collect();
    connections
        .into_iter()
        .map(|mut con| {
            let (key, block, on_run) = (key.to_owned(), block.clone(), on_run.clone());
            std::thread::spawn(move || {
                let got = claim(&mut con, &key, 10_000, 60_000, &["BLOCK", &block]);
                if let Claim::Run { token, fence } = &got {
                    on_run(&mut con, token, *fence);
                }
                got
            })
        })
        .collect()
}

fn replies(claims: Vec<JoinHandle<Claim>>) -> Vec<Claim> {
    claims.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn twenty_concurrent_duplicates_run_once_and_the_rest_get_its_result() {
    let server = Server::start();
    let replies = replies(waiting_claims(
        &server,
        "order:1",
        20,
        10_000,
        |con, token, fence| {
            // The work, then its result for every duplicate.
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(done(con, "order:1", token, &format!("paid {fence}")), 1);
        },
    ));
    let runs: Vec<i64> = replies
        .iter()
        .filter_map(|reply| match reply {
            Claim::Run { fence, .. } => Some(*fence),
            _ => None,
        })
        .collect();
    assert_eq!(runs.len(), 1, "exactly one run: {replies:?}");
    let expected = Claim::Replay {
        fence: runs[0],
        result: format!("paid {}", runs[0]),
    };
    let replays = replies.iter().filter(|reply| **reply == expected).count();
    assert_eq!(
        replays, 19,
        "every duplicate got the run's result: {replies:?}"
    );
    let mut con = server.connect();
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_once_runs").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_once_replays").as_deref(),
        Some("19")
    );
}

#[test]
fn duplicates_within_keep_replay_at_once_and_after_keep_the_next_claim_runs_again() {
    let server = Server::start();
    let mut con = server.connect();
    let Claim::Run { token, fence } = claim(&mut con, "k", 10_000, 500, &[]) else {
        panic!("the first claim runs");
    };
    assert_eq!(claim(&mut con, "k", 10_000, 500, &[]), Claim::Busy);
    assert_eq!(done(&mut con, "k", &token, "r1"), 1);
    assert_eq!(done(&mut con, "k", &token, "r2"), 0, "stored once");
    let replay = Claim::Replay {
        fence,
        result: "r1".into(),
    };
    assert_eq!(claim(&mut con, "k", 10_000, 500, &[]), replay);
    assert_eq!(
        claim(&mut con, "k", 10_000, 500, &["TOKEN", &token]),
        replay,
        "the holder's own token is a duplicate too once done"
    );
    let pttl = int(&mut con, &["PTTL", "k"]);
    assert!(
        pttl > 0 && pttl <= 500,
        "the key lives the keep time: {pttl}"
    );
    let mut next = Claim::Busy;
    eventually(Duration::from_secs(10), "the keep time ends", || {
        next = claim(&mut con, "k", 10_000, 500, &[]);
        !matches!(next, Claim::Replay { .. })
    });
    match next {
        Claim::Run { fence: again, .. } => assert!(again > fence),
        other => panic!("after keep the next claim runs: {other:?}"),
    }
}

/// Three duplicates wait for `key`; the one granted the run stores `result`. Returns
/// every reply, once `give_up` ended the first run without DONE.
fn duplicates_after_giving_up(
    server: &Server,
    con: &mut Connection,
    key: &str,
    result: &str,
    give_up: impl FnOnce(&mut Connection),
) -> Vec<Claim> {
    let (stored_key, result) = (key.to_owned(), result.to_owned());
    let claims = waiting_claims(server, key, 3, 20_000, move |waiter, token, _| {
        assert_eq!(done(waiter, &stored_key, token, &result), 1);
    });
    wait_for_waiters(con, key, 3);
    give_up(con);
    replies(claims)
}

/// Of `replies`, exactly one run, above `fence`, and every other its result.
fn assert_one_retry(replies: &[Claim], fence: i64, result: &str) {
    let runs: Vec<i64> = replies
        .iter()
        .filter_map(|reply| match reply {
            Claim::Run { fence, .. } => Some(*fence),
            _ => None,
        })
        .collect();
    assert_eq!(runs.len(), 1, "exactly one retry: {replies:?}");
    assert!(runs[0] > fence, "the retry runs under a higher fence");
    let replay = Claim::Replay {
        fence: runs[0],
        result: result.into(),
    };
    assert_eq!(
        replies.iter().filter(|reply| **reply == replay).count(),
        replies.len() - 1,
        "the rest get the retry's result: {replies:?}"
    );
}

#[test]
fn a_run_released_without_done_goes_to_exactly_one_waiter_and_the_rest_get_its_result() {
    let server = Server::start();
    let mut con = server.connect();
    let Claim::Run { token, fence } = claim(&mut con, "job", 10_000, 60_000, &[]) else {
        panic!("runs");
    };
    let replies = duplicates_after_giving_up(&server, &mut con, "job", "second try", |con| {
        assert_eq!(int(con, &["LOCK.RELEASE", "job", &token]), 1);
    });
    assert_one_retry(&replies, fence, "second try");
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_once_retries").as_deref(),
        Some("1")
    );
}

#[test]
fn a_run_whose_session_closes_goes_to_the_next_waiter() {
    let server = Server::start();
    let mut con = server.connect();
    let Claim::Run { fence, .. } = claim(&mut con, "job", 10_000, 60_000, &["SESSION", "worker-1"])
    else {
        panic!("runs");
    };
    let replies = duplicates_after_giving_up(&server, &mut con, "job", "after close", |con| {
        let _: Value = cmd("LOCK.CLOSE").arg("worker-1").query(con).unwrap();
    });
    assert_one_retry(&replies, fence, "after close");
}

#[test]
fn a_lease_that_runs_out_hands_the_run_to_the_next_waiter_and_done_answers_the_rest() {
    let server = Server::start();
    let mut con = server.connect();
    let Claim::Run { fence, .. } = claim(&mut con, "lease", 10_000, 60_000, &["TOKEN", "t"]) else {
        panic!("runs");
    };
    // The holder dies mid-work: its lease, shortened here, runs out.
    let replies = duplicates_after_giving_up(&server, &mut con, "lease", "retried", |con| {
        assert_eq!(int(con, &["LOCK.REFRESH", "lease", "t", "200"]), 1);
    });
    assert_one_retry(&replies, fence, "retried");
}

#[test]
fn another_fingerprint_is_refused_while_running_and_while_done() {
    let server = Server::start();
    let mut con = server.connect();
    let refusal = "FINGERPRINT this key was claimed with another fingerprint";
    let Claim::Run { token, fence } =
        claim(&mut con, "pay", 10_000, 60_000, &["FINGERPRINT", "sha-a"])
    else {
        panic!("runs");
    };
    let args = [
        "LOCK.ONCE",
        "pay",
        "10000",
        "KEEP",
        "60000",
        "FINGERPRINT",
        "sha-b",
    ];
    assert_eq!(error_of(&mut con, &args), refusal, "while running");
    assert_eq!(
        claim(&mut con, "pay", 10_000, 60_000, &["FINGERPRINT", "sha-a"]),
        Claim::Busy
    );
    assert_eq!(
        claim(&mut con, "pay", 10_000, 60_000, &[]),
        Claim::Busy,
        "a claim without one matches any"
    );
    assert_eq!(done(&mut con, "pay", &token, "ok"), 1);
    assert_eq!(error_of(&mut con, &args), refusal, "while done");
    assert_eq!(
        claim(&mut con, "pay", 10_000, 60_000, &[]),
        Claim::Replay {
            fence,
            result: "ok".into()
        }
    );
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_once_fingerprint_refused").as_deref(),
        Some("2")
    );
}

/// `fencelock.max-token-length` bounds the fingerprints new claims store. Lowered below
/// a stored one, a claim with that very fingerprint still matches the key (busy while
/// it runs, answered its result once done), as a holder keeps working with a token
/// granted under a larger limit; any other fingerprint over the limit is refused as
/// invalid, and one within it but different as another fingerprint.
#[test]
fn a_stored_fingerprint_longer_than_a_lowered_limit_still_matches() {
    let server = Server::start();
    let mut con = server.connect();
    let long = "f".repeat(100);
    let other = "g".repeat(100);
    let Claim::Run { token, fence } =
        claim(&mut con, "pay", 10_000, 60_000, &["FINGERPRINT", &long])
    else {
        panic!("runs");
    };
    config_set(&mut con, "fencelock.max-token-length", "10").unwrap();
    fn with(fp: &str) -> [&str; 7] {
        [
            "LOCK.ONCE",
            "pay",
            "10000",
            "KEEP",
            "60000",
            "FINGERPRINT",
            fp,
        ]
    }
    assert_eq!(
        claim(&mut con, "pay", 10_000, 60_000, &["FINGERPRINT", &long]),
        Claim::Busy,
        "while running"
    );
    assert_eq!(done(&mut con, "pay", &token, "ok"), 1);
    assert_eq!(
        claim(&mut con, "pay", 10_000, 60_000, &["FINGERPRINT", &long]),
        Claim::Replay {
            fence,
            result: "ok".into()
        },
        "while done"
    );
    assert_eq!(error_of(&mut con, &with(&other)), "ERR invalid fingerprint");
    assert_eq!(
        error_of(&mut con, &with("short")),
        "FINGERPRINT this key was claimed with another fingerprint"
    );
    let free = [
        "LOCK.ONCE",
        "free",
        "10000",
        "KEEP",
        "60000",
        "FINGERPRINT",
        &long,
    ];
    assert_eq!(
        error_of(&mut con, &free),
        "ERR invalid fingerprint",
        "no new claim stores it"
    );
}

#[test]
fn errors_are_worded_as_redis_words_them() {
    let server = Server::start();
    let mut con = server.connect();
    let cases: [(&[&str], &str); 9] = [
        (
            &["LOCK.ONCE", "k", "1000"],
            "ERR wrong number of arguments for 'lock.once' command",
        ),
        (
            &["LOCK.ONCE", "k", "1000", "BLOCK", "5"],
            "ERR syntax error",
        ),
        (
            &["LOCK.ONCE", "k", "x", "KEEP", "5"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["LOCK.ONCE", "k", "1000", "KEEP", "0"],
            "ERR invalid expire time in 'lock.once' command",
        ),
        (
            &["LOCK.ONCE", "k", "0", "KEEP", "10"],
            "ERR invalid expire time in 'lock.once' command",
        ),
        (
            &["LOCK.ONCE", "k", "10", "KEEP", "10", "BLOCK", "-1"],
            "ERR timeout is negative",
        ),
        (
            &["LOCK.ONCE", "k", "10", "KEEP", "10", "FINGERPRINT", ""],
            "ERR invalid fingerprint",
        ),
        (
            &["LOCK.DONE", "k", "t"],
            "ERR wrong number of arguments for 'lock.done' command",
        ),
        (&["LOCK.DONE", "k", "", "r"], "ERR invalid token"),
    ];
    for (args, expected) in cases {
        assert_eq!(error_of(&mut con, args), expected, "{args:?}");
    }
    let _: () = cmd("SET").arg("s").arg("v").query(&mut con).unwrap();
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    assert_eq!(
        error_of(&mut con, &["LOCK.ONCE", "s", "10", "KEEP", "10"]),
        wrongtype
    );
    assert_eq!(error_of(&mut con, &["LOCK.DONE", "s", "t", "r"]), wrongtype);
    assert_eq!(done(&mut con, "free", "t", "r"), 0, "nothing runs there");
}

#[test]
fn an_oversize_result_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-result-length")
        .arg("4")
        .query(&mut con)
        .unwrap();
    let Claim::Run { token, fence } = claim(&mut con, "k", 10_000, 60_000, &[]) else {
        panic!("runs");
    };
    assert_eq!(
        error_of(&mut con, &["LOCK.DONE", "k", &token, "12345"]),
        "ERR result exceeds maximum allowed size (fencelock.max-result-length)"
    );
    assert_eq!(
        testkit::fence_of(&mut con, "k", &token),
        Some(fence),
        "still running"
    );
    assert_eq!(done(&mut con, "k", &token, "1234"), 1);
    assert_eq!(
        claim(&mut con, "k", 10_000, 60_000, &[]),
        Claim::Replay {
            fence,
            result: "1234".into()
        }
    );
}

#[test]
fn a_running_claim_is_a_mutex_and_a_done_record_admits_no_lock() {
    let server = Server::start();
    let mut con = server.connect();
    let Claim::Run { token, fence } = claim(&mut con, "k", 10_000, 60_000, &["TOKEN", "mine"])
    else {
        panic!("runs");
    };
    assert_eq!(token, "mine");
    assert_eq!(testkit::fence(&mut con, "k"), Some(fence));
    assert_eq!(acquire(&mut con, "k", 1_000, &[]), None, "held exclusively");
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "k", "mine", "20000"]), 1);
    assert!(int(&mut con, &["PTTL", "k"]) > 10_000);
    assert_eq!(
        claim(&mut con, "k", 30_000, 60_000, &["TOKEN", "mine"]),
        Claim::Run {
            token: "mine".into(),
            fence
        },
        "the holder's retry renews, as an acquire would"
    );
    let info = lock_info(&mut con, "k").unwrap();
    assert_eq!(
        info.get("state"),
        Some(&Value::SimpleString("running".into()))
    );
    assert_eq!(done(&mut con, "k", "mine", "result"), 1);
    assert_eq!(acquire(&mut con, "k", 1_000, &[]), None, "busy while done");
    assert_eq!(testkit::fence(&mut con, "k"), None, "held by nobody");
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", "mine"]), 0);
    assert_eq!(int(&mut con, &["LOCK.REFRESH", "k", "mine", "1000"]), 0);
    let info = lock_info(&mut con, "k").unwrap();
    assert_eq!(info.get("state"), Some(&Value::SimpleString("done".into())));
    assert_eq!(info.get("result-size"), Some(&Value::Int(6)));
    assert!(matches!(info.get("keep-ms"), Some(Value::Int(left)) if *left > 0 && *left <= 60_000));
    // A plain lock is busy for a claim, as a running one is.
    let (plain, _) = acquire(&mut con, "plain", 10_000, &[]).unwrap();
    assert_eq!(claim(&mut con, "plain", 10_000, 60_000, &[]), Claim::Busy);
    assert_eq!(
        done(&mut con, "plain", &plain, "r"),
        0,
        "a plain lock is no claim"
    );
}

#[test]
fn a_claim_waiting_behind_a_plain_lock_runs_when_it_is_released() {
    let server = Server::start();
    let mut con = server.connect();
    let (plain, plain_fence) = acquire(&mut con, "k", 10_000, &[]).unwrap();
    let claims = waiting_claims(&server, "k", 1, 20_000, |_, _, _| {});
    wait_for_waiters(&mut con, "k", 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &plain]), 1);
    match replies(claims).as_slice() {
        [Claim::Run { fence, .. }] => assert!(*fence > plain_fence),
        other => panic!("the claim runs: {other:?}"),
    }
}

#[test]
fn done_is_announced_as_a_keyspace_event() {
    let server = Server::start();
    let mut con = server.connect();
    let Claim::Run { token, .. } = claim(&mut con, "k", 10_000, 60_000, &[]) else {
        panic!("runs");
    };
    let mut events = keyspace_subscriber(&server, &mut con, &["SUBSCRIBE", "__keyspace@0__:k"]);
    assert_eq!(done(&mut con, "k", &token, "r"), 1);
    let Reply::Array(Some(message)) = events.read_reply() else {
        panic!("a keyspace message");
    };
    assert_eq!(
        message.last(),
        Some(&Reply::Bulk(Some(b"lock.done".to_vec())))
    );
}

#[test]
fn acl_key_patterns_apply_to_claims_and_results() {
    let server = Server::start();
    let mut admin = server.connect();
    let _: () = cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("on")
        .arg(">secret")
        .arg("~once:*")
        .arg("%R~seen:*")
        .arg("+@all")
        .query(&mut admin)
        .unwrap();
    let mut con = server.connect();
    let _: () = cmd("AUTH")
        .arg("app")
        .arg("secret")
        .query(&mut con)
        .unwrap();
    let Claim::Run { token, .. } = claim(&mut con, "once:1", 10_000, 60_000, &[]) else {
        panic!("runs");
    };
    assert_eq!(done(&mut con, "once:1", &token, "r"), 1);
    for args in [
        &["LOCK.ONCE", "other:1", "10000", "KEEP", "1000"][..],
        &["LOCK.ONCE", "seen:1", "10000", "KEEP", "1000"],
        &["LOCK.DONE", "other:1", "t", "r"],
        &["LOCK.DONE", "seen:1", "t", "r"],
    ] {
        assert!(
            error_of(&mut con, args).starts_with("NOPERM"),
            "{args:?}: a claim and a result need write access to the key"
        );
    }
}

/// A waiting duplicate whose key becomes a done record by another way than
/// `LOCK.DONE` (`RESTORE … REPLACE`, `RENAME` onto it) is answered with that record's
/// result at once, as a claim sent then would be, not left to its timeout.
#[test]
fn a_waiting_duplicate_is_answered_when_its_key_becomes_a_done_record_any_way() {
    let server = Server::start();
    let mut con = server.connect();
    let Claim::Run { token, fence } = claim(&mut con, "src", 10_000, 60_000, &[]) else {
        panic!("the first claim runs");
    };
    assert_eq!(done(&mut con, "src", &token, "restored"), 1);
    let dump: Vec<u8> = cmd("DUMP").arg("src").query(&mut con).unwrap();
    for (step, moved) in [("restore", false), ("rename", true)] {
        let _: Value = cmd("DEL").arg("k").query(&mut con).unwrap();
        assert!(matches!(
            claim(&mut con, "k", 60_000, 60_000, &[]),
            Claim::Run { .. }
        ));
        let waiting = waiting_claims(&server, "k", 1, 8_000, |_, _, _| {});
        wait_for_waiters(&mut con, "k", 1);
        if moved {
            let _: () = cmd("RENAME").arg("src").arg("k").query(&mut con).unwrap();
        } else {
            let _: () = cmd("RESTORE")
                .arg("k")
                .arg(60_000)
                .arg(&dump)
                .arg("REPLACE")
                .query(&mut con)
                .unwrap();
        }
        let expected = Claim::Replay {
            fence,
            result: "restored".into(),
        };
        assert_eq!(replies(waiting), vec![expected], "{step}");
        assert_eq!(waiters(&mut con, "k"), 0, "{step}");
    }
}

/// A keep time no `LOCK.DONE` could turn into a key expiry is refused where it enters:
/// by `LOCK.ONCE` even under the largest `fencelock.max-ttl`, and by `LOCK.RECORD`, the
/// replication form, which accepts any keep a primary's `LOCK.ONCE` could have accepted
/// (a replica may run with a lower `max-ttl`) and no more. The largest accepted keep
/// still lets `LOCK.DONE` finish the run.
#[test]
fn a_keep_time_done_could_not_finish_is_refused() {
    let server = Server::start();
    let mut con = server.connect();
    let largest = (i64::MAX / 2).to_string();
    let beyond = (i64::MAX / 2 + 1).to_string();
    config_set(&mut con, "fencelock.max-ttl", &i64::MAX.to_string()).unwrap();
    assert_eq!(
        error_of(&mut con, &["LOCK.ONCE", "k", "1000", "KEEP", &beyond]),
        "ERR invalid expire time in 'lock.once' command"
    );
    for keep in [beyond.as_str(), "9223372036854775807", "0"] {
        assert_eq!(
            error_of(
                &mut con,
                &["LOCK.RECORD", "r", "RUNNING", "tok", "5", "KEEP", keep]
            ),
            "ERR invalid expire time in 'lock.record' command",
            "RUNNING, KEEP {keep}"
        );
        assert_eq!(
            error_of(
                &mut con,
                &["LOCK.RECORD", "r", "DONE", "5", "paid", "KEEP", keep]
            ),
            "ERR invalid expire time in 'lock.record' command",
            "DONE, KEEP {keep}"
        );
    }
    let exists: i64 = cmd("EXISTS").arg("r").query(&mut con).unwrap();
    assert_eq!(exists, 0, "a refused record writes nothing");
    let Claim::Run { token, .. } = claim(&mut con, "k", 1_000, i64::MAX / 2, &[]) else {
        panic!("the largest keep runs")
    };
    assert_eq!(done(&mut con, "k", &token, "paid"), 1);
    let ok: String = cmd("LOCK.RECORD")
        .arg(&["r", "RUNNING", "tok", "5", "KEEP", largest.as_str()][..])
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(done(&mut con, "r", "tok", "paid"), 1, "DONE finishes it");
    // A deadline is an absolute time: any positive one is a key expiry (as `PXAT` is
    // to `SET`), and DONE computes the result's own from its keep.
    let far = i64::MAX.to_string();
    let ok: String = cmd("LOCK.RECORD")
        .arg(
            &[
                "p",
                "RUNNING",
                "tok",
                "5",
                "KEEP",
                "1000",
                "PXAT",
                far.as_str(),
            ][..],
        )
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(done(&mut con, "p", "tok", "paid"), 1, "DONE finishes it");
    assert_eq!(
        error_of(
            &mut con,
            &[
                "LOCK.RECORD",
                "p",
                "DONE",
                "5",
                "x",
                "KEEP",
                "9",
                "PXAT",
                "0"
            ]
        ),
        "ERR invalid expire time in 'lock.record' command"
    );
}

/// `fencelock_held_locks` and `fencelock_once_done_records` of `INFO fencelock`.
fn held_and_done(con: &mut Connection) -> (i64, i64) {
    let gauge = |con: &mut Connection, name: &str| -> i64 {
        info_field(con, "fencelock", name)
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("{name}"))
    };
    (
        gauge(con, "fencelock_held_locks"),
        gauge(con, "fencelock_once_done_records"),
    )
}

/// A done record holds no lease: `fencelock_held_locks` stops counting its key when
/// `LOCK.DONE` stores the result, and `fencelock_once_done_records` counts it until it
/// goes, however it is written (`DONE`, `RESTORE`, a reload) or goes (`DEL`, expiry).
#[test]
fn a_done_record_counts_as_a_stored_result_not_as_a_held_lock() {
    let server = Server::start();
    let mut con = server.connect();
    let Claim::Run { token, .. } = claim(&mut con, "order", 10_000, 60_000, &[]) else {
        panic!("a run")
    };
    assert_eq!(held_and_done(&mut con), (1, 0), "running: a held lock");
    assert_eq!(done(&mut con, "order", &token, "paid"), 1);
    assert_eq!(held_and_done(&mut con), (0, 1), "done: a stored result");
    let dump = dump(&mut con, "order");
    restore(&mut con, "copy", &dump);
    assert_eq!(held_and_done(&mut con), (0, 2));
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(held_and_done(&mut con), (0, 2), "after a reload");
    let _: i64 = cmd("DEL").arg("copy").query(&mut con).unwrap();
    let _: i64 = cmd("PEXPIRE").arg("order").arg(1).query(&mut con).unwrap();
    eventually(Duration::from_secs(10), "the record expired", || {
        held_and_done(&mut con) == (0, 0)
    });
}
