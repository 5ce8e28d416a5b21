//! Shared holders: semaphores (`LIMIT n`) and read-write locks (`SHARED`). Grants with
//! a fence each; FIFO waiting across modes and handoff of a freed permit (release, one
//! holder's own expiry or shortened lease, `DEL`, `UNLINK`, `FLUSHALL`); readers granted
//! together; waiters behind one that stops waiting (timeout, `CLIENT UNBLOCK`,
//! disconnect); `WRONGMODE` and limit errors byte for byte; idempotent same-token
//! retries per mode; fences across modes; `LOCK.FENCE`, `LOCK.INFO`, keyspace events
//! per holder, `PTTL` and key lifetime; an ended holder ignored at once (even while
//! writes are paused); `LOCK.GUARD` with a shared holder's token; memory per holder;
//! the `LOCK.APPLY`/`LOCK.DROP` effect forms; `fencelock.max-holders`; `MULTI` and
//! scripts; `CLIENT UNBLOCK`; a queued waiter whose mode no longer matches; and
//! `fencelock.max-waiters`.

use std::time::{Duration, Instant};

use testkit::resp::{err, RawClient, Reply};
use testkit::*;

const NOT_INT: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";
const BAD_LIMIT: &str = "ERR invalid limit";
const NOT_HELD: &str = "NOTHELD this token does not hold the lock";

/// A `LOCK.ACQUIRE` reply: `[token, fence]` or nil.
type Grant = Option<(String, i64)>;

/// A grant that must happen.
fn hold(con: &mut Connection, key: &str, ttl: i64, extra: &[&str]) -> (String, i64) {
    acquire(con, key, ttl, extra).unwrap_or_else(|| panic!("{key} {extra:?}: not granted"))
}

/// `LOCK.ACQUIRE key ttl extra…` on a raw connection, the reply as sent.
fn acquire_raw(raw: &mut RawClient, key: &str, ttl: &str, extra: &[&str]) -> Reply {
    let mut argv = vec!["LOCK.ACQUIRE", key, ttl];
    argv.extend_from_slice(extra);
    raw.call_str(&argv)
}

/// The `[token, fence]` of a grant reply; panics on anything else.
fn granted(reply: &Reply) -> (String, i64) {
    let (token, fence) = reply
        .grant()
        .unwrap_or_else(|| panic!("not a grant: {reply:?}"));
    (String::from_utf8(token.to_vec()).unwrap(), fence)
}

fn refresh(con: &mut Connection, key: &str, token: &str, ttl: i64) -> i64 {
    int(con, &["LOCK.REFRESH", key, token, &ttl.to_string()])
}

fn release(con: &mut Connection, key: &str, token: &str) -> i64 {
    int(con, &["LOCK.RELEASE", key, token])
}

/// An integer field of `LOCK.INFO key` (0 when the reply is nil).
fn info_int(con: &mut Connection, key: &str, field: &str) -> i64 {
    lock_info(con, key).map_or(0, |info| {
        let value = info
            .get(field)
            .unwrap_or_else(|| panic!("no {field} in LOCK.INFO {key}: {info:?}"));
        redis::from_redis_value(value.clone()).unwrap()
    })
}

fn holders(con: &mut Connection, key: &str) -> i64 {
    info_int(con, key, "holders")
}

/// A client blocked in `LOCK.ACQUIRE … BLOCK 0`, on its own connection.
struct Waiter(RawClient);

impl Waiter {
    /// Sends `LOCK.ACQUIRE key ttl TOKEN token BLOCK 0 mode…` and returns once it is
    /// queued (the key has one more waiter than before).
    fn queue(
        server: &Server,
        con: &mut Connection,
        key: &str,
        ttl: i64,
        token: &str,
        mode: &[&str],
    ) -> Waiter {
        let before = waiters(con, key);
        let mut client = RawClient::connect(server.port);
        let ttl = ttl.to_string();
        let mut argv = vec!["LOCK.ACQUIRE", key, &ttl, "TOKEN", token, "BLOCK", "0"];
        argv.extend_from_slice(mode);
        client.send_pipeline(&[&argv]);
        wait_for_waiters(con, key, before + 1);
        Waiter(client)
    }

    /// The one reply, which must arrive within `within`.
    fn reply(&mut self, within: Duration) -> Reply {
        self.0
            .try_read_reply(within)
            .expect("the waiter was answered in time")
    }

    /// The grant, which must arrive within 5 s.
    fn granted(&mut self) -> (String, i64) {
        granted(&self.reply(Duration::from_secs(5)))
    }

    /// Nothing was answered yet.
    fn assert_waiting(&mut self, what: &str) {
        let reply = self.0.try_read_reply(Duration::from_millis(150));
        assert_eq!(reply, None, "{what}: still waiting");
    }
}

/// What one `LOCK.INFO` value must be.
#[derive(Debug)]
enum Want {
    Int(i64),
    Text(&'static str),
    /// An integer in `(max - 5000, max]`: a remaining lease of at most `max` ms.
    TtlUpTo(i64),
}

fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Status(s) => Some(s.clone()),
        Reply::Bulk(Some(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}

/// `LOCK.INFO key` has exactly these fields, in this order, with these values.
fn assert_info(raw: &mut RawClient, key: &str, want: &[(&str, Want)]) -> Reply {
    let reply = raw.call_str(&["LOCK.INFO", key]);
    let Reply::Array(Some(items)) = &reply else {
        panic!("LOCK.INFO {key}: {reply:?}")
    };
    let names: Vec<String> = items
        .iter()
        .step_by(2)
        .map(|name| text(name).unwrap_or_else(|| panic!("field name {name:?}")))
        .collect();
    let wanted: Vec<&str> = want.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, wanted, "LOCK.INFO {key}: {reply:?}");
    for ((name, want), value) in want.iter().zip(items.iter().skip(1).step_by(2)) {
        let ok = match want {
            Want::Int(n) => *value == Reply::Integer(*n),
            Want::Text(s) => text(value).as_deref() == Some(*s),
            Want::TtlUpTo(max) => {
                matches!(value, Reply::Integer(ms) if *ms > max - 5_000 && ms <= max)
            }
        };
        assert!(ok, "LOCK.INFO {key} {name}: {value:?}, want {want:?}");
    }
    reply
}

/// The fields of a held lock: (mode, holders, limit if a semaphore) and waiters split
/// (exclusive, shared).
fn held_info(
    fence: i64,
    ttl: i64,
    mode: &'static str,
    holders: i64,
    limit: Option<i64>,
    waiting: (i64, i64),
) -> Vec<(&'static str, Want)> {
    let mut fields = vec![
        ("held", Want::Int(1)),
        ("fence", Want::Int(fence)),
        ("ttl-ms", Want::TtlUpTo(ttl)),
        ("waiters", Want::Int(waiting.0 + waiting.1)),
        ("mode", Want::Text(mode)),
        ("holders", Want::Int(holders)),
    ];
    if let Some(limit) = limit {
        fields.push(("limit", Want::Int(limit)));
    }
    fields.push(("waiters-exclusive", Want::Int(waiting.0)));
    fields.push(("waiters-shared", Want::Int(waiting.1)));
    fields
}

// ---------------------------------------------------------------------------------
// Semaphores

#[test]
fn a_semaphore_of_three_grants_three_holders_and_refuses_a_fourth() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let mut fences = Vec::new();
    for token in ["a", "b", "c"] {
        let (granted_token, fence) = hold(&mut con, "sem", 60_000, &["TOKEN", token, "LIMIT", "3"]);
        assert_eq!(granted_token, token);
        fences.push(fence);
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert_eq!(
        acquire(&mut con, "sem", 60_000, &["TOKEN", "d", "LIMIT", "3"]),
        None
    );
    assert_eq!(acquire(&mut con, "sem", 60_000, &["LIMIT", "3"]), None);
    assert_eq!(
        acquire(&mut con, "sem", 60_000, &["TOKEN", "x"]),
        None,
        "an exclusive acquire on a semaphore is busy, not an error"
    );
    assert_eq!(fence_of(&mut con, "sem", "d"), None);
    for (token, fence) in ["a", "b", "c"].iter().zip(&fences) {
        assert_eq!(fence_of(&mut con, "sem", token), Some(*fence), "{token}");
        assert_eq!(refresh(&mut con, "sem", token, 60_000), 1, "{token}");
    }
    let kind: String = cmd("TYPE").arg("sem").query(&mut con).unwrap();
    assert_eq!(kind, "fencelock");
    assert_info(
        &mut raw,
        "sem",
        &held_info(fences[2], 60_000, "semaphore", 3, Some(3), (0, 0)),
    );
    // Without TOKEN the server generates one, as for an exclusive lock.
    let (token, _) = hold(&mut con, "sem2", 10_000, &["LIMIT", "3"]);
    assert_eq!(token.len(), 32);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn blocked_acquirers_get_permits_freed_by_release_in_fifo_order() {
    let server = Server::start();
    let mut con = server.connect();
    let mut last = 0;
    for token in ["a", "b", "c"] {
        last = hold(&mut con, "sem", 60_000, &["TOKEN", token, "LIMIT", "3"]).1;
    }
    let mut w1 = Waiter::queue(&server, &mut con, "sem", 60_000, "w1", &["LIMIT", "3"]);
    let mut w2 = Waiter::queue(&server, &mut con, "sem", 60_000, "w2", &["LIMIT", "3"]);
    let mut w3 = Waiter::queue(&server, &mut con, "sem", 60_000, "w3", &["LIMIT", "3"]);
    assert_eq!(info_int(&mut con, "sem", "waiters-shared"), 3);
    w1.assert_waiting("no permit is free");

    assert_eq!(release(&mut con, "sem", "a"), 1);
    let (token, fence) = w1.granted();
    assert_eq!(token, "w1");
    assert!(fence > last, "{fence} > {last}");
    last = fence;
    w2.assert_waiting("one permit was freed, the first waiter took it");
    assert_eq!(holders(&mut con, "sem"), 3);

    assert_eq!(release(&mut con, "sem", "b"), 1);
    let (token, fence) = w2.granted();
    assert_eq!(token, "w2");
    assert!(fence > last);
    last = fence;
    w3.assert_waiting("the second permit went to the second waiter");

    assert_eq!(release(&mut con, "sem", "w1"), 1);
    let (token, fence) = w3.granted();
    assert_eq!(token, "w3");
    assert!(fence > last);
    assert_eq!(holders(&mut con, "sem"), 3);
    assert_eq!(waiters(&mut con, "sem"), 0);
    for token in ["c", "w2", "w3"] {
        assert_eq!(refresh(&mut con, "sem", token, 60_000), 1, "{token}");
    }
}

#[test]
fn a_permit_freed_by_one_holders_expiry_goes_to_the_first_waiter_at_once() {
    let server = Server::start();
    let mut con = server.connect();
    let mut lateness = Vec::new();
    for round in 0..3 {
        let key = format!("sem{round}");
        // The short holder first: while it is the only one, the key's expiry is its lease.
        hold(&mut con, &key, 250, &["TOKEN", "short", "LIMIT", "3"]);
        let deadline = int(&mut con, &["PEXPIRETIME", &key]);
        hold(&mut con, &key, 60_000, &["TOKEN", "b", "LIMIT", "3"]);
        hold(&mut con, &key, 60_000, &["TOKEN", "c", "LIMIT", "3"]);
        let mut w1 = Waiter::queue(&server, &mut con, &key, 60_000, "w1", &["LIMIT", "3"]);
        let mut w2 = Waiter::queue(&server, &mut con, &key, 60_000, "w2", &["LIMIT", "3"]);
        let (token, _) = w1.granted();
        lateness.push(now_ms() - deadline);
        assert_eq!(token, "w1");
        w2.assert_waiting("only one permit was freed");
        assert_eq!(refresh(&mut con, &key, "short", 60_000), 0);
        assert_eq!(refresh(&mut con, &key, "b", 60_000), 1);
        assert_eq!(refresh(&mut con, &key, "c", 60_000), 1);
        assert_eq!(holders(&mut con, &key), 3);
    }
    lateness.sort_unstable();
    assert!(
        lateness[0] >= 0,
        "never before the lease ends: {lateness:?}"
    );
    assert!(
        lateness[1] <= 25,
        "the freed permit is handed on within a few ms: {lateness:?}"
    );
    assert!(lateness[2] < 1_000, "{lateness:?}");
}

#[test]
fn deleting_a_semaphore_grants_every_waiter_that_fits_in_fifo_order() {
    let server = Server::start();
    let mut con = server.connect();
    let mut last = 0;
    for token in ["a", "b", "c"] {
        last = hold(&mut con, "sem", 60_000, &["TOKEN", token, "LIMIT", "3"]).1;
    }
    let mut queued: Vec<Waiter> = (1..=4)
        .map(|i| {
            Waiter::queue(
                &server,
                &mut con,
                "sem",
                60_000,
                &format!("w{i}"),
                &["LIMIT", "3"],
            )
        })
        .collect();
    assert_eq!(int(&mut con, &["DEL", "sem"]), 1);
    for (i, waiter) in queued.iter_mut().take(3).enumerate() {
        let (token, fence) = waiter.granted();
        assert_eq!(token, format!("w{}", i + 1));
        assert!(fence > last, "granted in queue order: {fence} > {last}");
        last = fence;
    }
    queued[3].assert_waiting("three permits, three grants");
    assert_eq!(refresh(&mut con, "sem", "a", 60_000), 0, "DEL ended it");
    assert_eq!(holders(&mut con, "sem"), 3);
    assert_eq!(waiters(&mut con, "sem"), 1);
    assert_eq!(release(&mut con, "sem", "w2"), 1);
    let (token, fence) = queued[3].granted();
    assert_eq!(token, "w4");
    assert!(fence > last);
}

#[test]
fn a_holder_that_never_releases_frees_only_its_own_permit_when_its_lease_ends() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "sem", 200, &["TOKEN", "gone", "LIMIT", "3"]);
    let (_, b) = hold(&mut con, "sem", 60_000, &["TOKEN", "b", "LIMIT", "3"]);
    let (_, c) = hold(&mut con, "sem", 60_000, &["TOKEN", "c", "LIMIT", "3"]);
    assert_eq!(holders(&mut con, "sem"), 3);
    eventually(Duration::from_secs(3), "the short lease ends", || {
        holders(&mut con, "sem") == 2
    });
    assert_eq!(fence_of(&mut con, "sem", "gone"), None);
    assert_eq!(refresh(&mut con, "sem", "gone", 60_000), 0, "never revived");
    assert_eq!(release(&mut con, "sem", "gone"), 0);
    assert_eq!(fence_of(&mut con, "sem", "b"), Some(b));
    assert_eq!(fence_of(&mut con, "sem", "c"), Some(c));
    assert_eq!(refresh(&mut con, "sem", "b", 60_000), 1);
    assert_eq!(refresh(&mut con, "sem", "c", 60_000), 1);
    assert!(int(&mut con, &["PTTL", "sem"]) > 50_000);
    // Exactly one permit is free again.
    let (_, d) = hold(&mut con, "sem", 60_000, &["TOKEN", "d", "LIMIT", "3"]);
    assert!(d > c);
    assert_eq!(
        acquire(&mut con, "sem", 60_000, &["TOKEN", "e", "LIMIT", "3"]),
        None
    );
}

// ---------------------------------------------------------------------------------
// Read-write locks

#[test]
fn readers_hold_together_and_a_writer_waits_for_all_of_them() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let mut fences = Vec::new();
    for i in 0..5 {
        let (_, fence) = hold(
            &mut con,
            "rw",
            60_000,
            &["TOKEN", &format!("r{i}"), "SHARED"],
        );
        fences.push(fence);
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert_info(
        &mut raw,
        "rw",
        &held_info(fences[4], 60_000, "shared", 5, None, (0, 0)),
    );
    assert_eq!(acquire(&mut con, "rw", 60_000, &["TOKEN", "writer"]), None);
    let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "writer", &[]);
    assert_eq!(info_int(&mut con, "rw", "waiters-exclusive"), 1);
    assert_eq!(info_int(&mut con, "rw", "waiters-shared"), 0);
    for i in 0..4 {
        assert_eq!(release(&mut con, "rw", &format!("r{i}")), 1);
    }
    writer.assert_waiting("one reader still holds");
    assert_eq!(release(&mut con, "rw", "r4"), 1);
    let (token, fence) = writer.granted();
    assert_eq!(token, "writer");
    assert!(fence > fences[4], "above every reader's fence");
    assert_eq!(holders(&mut con, "rw"), 1);
    let mode: String =
        redis::from_redis_value(lock_info(&mut con, "rw").unwrap()["mode"].clone()).unwrap();
    assert_eq!(mode, "exclusive");
    assert_eq!(
        acquire(&mut con, "rw", 60_000, &["SHARED"]),
        None,
        "no reader while the writer holds"
    );
}

#[test]
fn a_writer_is_granted_when_the_last_readers_own_lease_ends() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "rw", 100, &["TOKEN", "r1", "SHARED"]);
    hold(&mut con, "rw", 300, &["TOKEN", "r2", "SHARED"]);
    let deadline = int(&mut con, &["PEXPIRETIME", "rw"]);
    let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "writer", &[]);
    let (token, _) = writer.granted();
    let at = now_ms();
    assert_eq!(token, "writer");
    assert!(
        at >= deadline,
        "not before the last reader's lease ends ({at} < {deadline})"
    );
    assert!(at - deadline < 1_000, "{} ms late", at - deadline);
}

#[test]
fn a_reader_arriving_after_a_queued_writer_waits_behind_it() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "rw", 60_000, &["TOKEN", "r1", "SHARED"]);
    let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "writer", &[]);
    assert_eq!(
        acquire(&mut con, "rw", 60_000, &["TOKEN", "late", "SHARED"]),
        None,
        "a reader never overtakes a queued writer"
    );
    let mut reader = Waiter::queue(&server, &mut con, "rw", 60_000, "r2", &["SHARED"]);
    assert_eq!(info_int(&mut con, "rw", "waiters-exclusive"), 1);
    assert_eq!(info_int(&mut con, "rw", "waiters-shared"), 1);
    reader.assert_waiting("behind the writer");
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    let (token, writer_fence) = writer.granted();
    assert_eq!(token, "writer");
    reader.assert_waiting("the writer holds");
    assert_eq!(release(&mut con, "rw", "writer"), 1);
    let (token, fence) = reader.granted();
    assert_eq!(token, "r2");
    assert!(fence > writer_fence);
}

#[test]
fn readers_queued_behind_a_writer_are_granted_together_when_it_releases() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let (_, mut last) = hold(&mut con, "rw", 60_000, &["TOKEN", "x"]);
    let mut first_readers: Vec<Waiter> = (1..=3)
        .map(|i| {
            Waiter::queue(
                &server,
                &mut con,
                "rw",
                60_000,
                &format!("r{i}"),
                &["SHARED"],
            )
        })
        .collect();
    let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "w", &[]);
    let mut later_readers: Vec<Waiter> = (4..=5)
        .map(|i| {
            Waiter::queue(
                &server,
                &mut con,
                "rw",
                60_000,
                &format!("r{i}"),
                &["SHARED"],
            )
        })
        .collect();

    assert_eq!(release(&mut con, "rw", "x"), 1);
    for (i, reader) in first_readers.iter_mut().enumerate() {
        let (token, fence) = reader.granted();
        assert_eq!(token, format!("r{}", i + 1));
        assert!(fence > last);
        last = fence;
    }
    writer.assert_waiting("three readers hold");
    later_readers[0].assert_waiting("behind the writer");
    assert_info(
        &mut raw,
        "rw",
        &held_info(last, 60_000, "shared", 3, None, (1, 2)),
    );
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    writer.assert_waiting("one reader still holds");
    assert_eq!(release(&mut con, "rw", "r3"), 1);
    let (token, fence) = writer.granted();
    assert_eq!(token, "w");
    assert!(fence > last);
    last = fence;
    for reader in &mut later_readers {
        reader.assert_waiting("the writer holds");
    }

    assert_eq!(release(&mut con, "rw", "w"), 1);
    for (i, reader) in later_readers.iter_mut().enumerate() {
        let (token, fence) = reader.granted();
        assert_eq!(token, format!("r{}", i + 4));
        assert!(fence > last);
        last = fence;
    }
    assert_eq!(holders(&mut con, "rw"), 2);
    assert_eq!(waiters(&mut con, "rw"), 0);
}

// ---------------------------------------------------------------------------------
// Errors

#[test]
fn mode_mismatches_are_wrongmode_byte_for_byte_and_change_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    hold(&mut con, "lock:sem", 60_000, &["TOKEN", "s", "LIMIT", "3"]);
    hold(&mut con, "lock:rw", 60_000, &["TOKEN", "r", "SHARED"]);
    hold(&mut con, "lock:ex", 60_000, &["TOKEN", "x"]);
    let keys = ["lock:sem", "lock:rw", "lock:ex"];
    let before: Vec<_> = keys
        .iter()
        .map(|key| {
            (
                lock_info(&mut con, key).unwrap(),
                int(&mut con, &["PEXPIRETIME", key]),
            )
        })
        .collect();

    let sem = "WRONGMODE lock:sem is a semaphore with limit 3";
    let shared = "WRONGMODE lock:rw is held shared";
    let exclusive = "WRONGMODE lock:ex is held exclusively";
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        // Another token, another shape of shared holding.
        ("lock:sem", vec!["SHARED"], sem),
        ("lock:sem", vec!["TOKEN", "o", "SHARED"], sem),
        ("lock:sem", vec!["TOKEN", "o", "LIMIT", "4"], sem),
        (
            "lock:sem",
            vec!["TOKEN", "o", "LIMIT", "2", "BLOCK", "100"],
            sem,
        ),
        ("lock:sem", vec!["TOKEN", "o", "SHARED", "BLOCK", "0"], sem),
        ("lock:rw", vec!["TOKEN", "o", "LIMIT", "2"], shared),
        (
            "lock:rw",
            vec!["TOKEN", "o", "LIMIT", "2", "BLOCK", "0"],
            shared,
        ),
        // The holder's own token in another mode: no upgrade, no downgrade.
        ("lock:sem", vec!["TOKEN", "s"], sem),
        ("lock:sem", vec!["TOKEN", "s", "SHARED"], sem),
        ("lock:sem", vec!["TOKEN", "s", "LIMIT", "5"], sem),
        ("lock:sem", vec!["TOKEN", "s", "BLOCK", "0"], sem),
        ("lock:rw", vec!["TOKEN", "r"], shared),
        ("lock:rw", vec!["TOKEN", "r", "LIMIT", "2"], shared),
        ("lock:rw", vec!["TOKEN", "r", "BLOCK", "0"], shared),
        ("lock:ex", vec!["TOKEN", "x", "SHARED"], exclusive),
        ("lock:ex", vec!["TOKEN", "x", "LIMIT", "2"], exclusive),
        (
            "lock:ex",
            vec!["TOKEN", "x", "SHARED", "BLOCK", "0"],
            exclusive,
        ),
    ];
    let started = Instant::now();
    for (key, extra, expected) in &cases {
        assert_eq!(
            acquire_raw(&mut raw, key, "1000", extra),
            err(expected),
            "{key} {extra:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "an error never waits"
    );
    // Another token asking the other side of a read-write split is merely busy.
    for (key, extra) in [
        ("lock:rw", vec!["TOKEN", "o"]),
        ("lock:ex", vec!["TOKEN", "o", "SHARED"]),
        ("lock:ex", vec!["TOKEN", "o", "LIMIT", "2"]),
        ("lock:sem", vec!["TOKEN", "o"]),
    ] {
        assert_eq!(
            acquire_raw(&mut raw, key, "1000", &extra),
            Reply::Bulk(None),
            "{key} {extra:?}"
        );
    }
    for (key, (info, deadline)) in keys.iter().zip(before) {
        let mut now = lock_info(&mut con, key).unwrap();
        let mut then = info;
        now.remove("ttl-ms");
        then.remove("ttl-ms");
        assert_eq!(now, then, "{key}");
        assert_eq!(int(&mut con, &["PEXPIRETIME", key]), deadline, "{key}");
    }
    assert_eq!(fence_of(&mut con, "lock:sem", "o"), None);
    assert_eq!(waiters(&mut con, "lock:sem"), 0);
}

#[test]
fn invalid_limits_are_refused_byte_for_byte_and_create_nothing() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["LIMIT", "0"], BAD_LIMIT),
        (vec!["LIMIT", "-1"], BAD_LIMIT),
        (vec!["LIMIT", "10001"], BAD_LIMIT),
        (vec!["LIMIT", "9223372036854775807"], BAD_LIMIT),
        (vec!["SHARED", "LIMIT", "0"], BAD_LIMIT),
        (vec!["LIMIT", "0", "BLOCK", "0"], BAD_LIMIT),
        (vec!["LIMIT", "abc"], NOT_INT),
        (vec!["LIMIT", "1.5"], NOT_INT),
        (vec!["LIMIT", ""], NOT_INT),
        (vec!["LIMIT", "99999999999999999999"], NOT_INT),
        (vec!["LIMIT"], SYNTAX),
        (vec!["BLOCK", "0", "LIMIT"], SYNTAX),
        (vec!["SHARED", "SHARED"], SYNTAX),
        (vec!["shared", "SHARED"], SYNTAX),
        (vec!["LIMIT", "2", "limit", "2"], SYNTAX),
        (vec!["SHARED", "1"], SYNTAX),
    ];
    for (extra, expected) in &cases {
        assert_eq!(
            acquire_raw(&mut raw, "k", "1000", extra),
            err(expected),
            "{extra:?}"
        );
    }
    assert_eq!(raw.call_str(&["EXISTS", "k"]), Reply::Integer(0));
    // The bounds and the spellings that are accepted.
    assert!(acquire_raw(&mut raw, "max", "1000", &["LIMIT", "10000"])
        .grant()
        .is_some());
    assert!(acquire_raw(&mut raw, "one", "1000", &["limit", "1"])
        .grant()
        .is_some());
    assert!(acquire_raw(&mut raw, "lower", "1000", &["shared"])
        .grant()
        .is_some());
    let both = acquire_raw(&mut raw, "both", "1000", &["SHARED", "LIMIT", "2"]);
    let (_, fence) = granted(&both);
    assert_info(
        &mut raw,
        "both",
        &held_info(fence, 1_000, "semaphore", 1, Some(2), (0, 0)),
    );
}

// ---------------------------------------------------------------------------------
// Retries, fences, LOCK.FENCE, LOCK.INFO

#[test]
fn same_token_retries_are_idempotent_in_each_shared_mode() {
    let server = Server::start();
    let mut con = server.connect();
    // A reader: same fence, the lease restarts, still one holder.
    let first = hold(&mut con, "rw", 1_000, &["TOKEN", "r", "SHARED"]);
    let again = hold(&mut con, "rw", 60_000, &["token", "r", "shared"]);
    assert_eq!(again, first);
    assert!(int(&mut con, &["PTTL", "rw"]) > 50_000);
    assert_eq!(holders(&mut con, "rw"), 1);

    // A full semaphore with a queued waiter: its holders still renew, at once, with or
    // without BLOCK, and the retry adds no holder.
    let s1 = hold(&mut con, "sem", 60_000, &["TOKEN", "s1", "LIMIT", "2"]);
    let s2 = hold(&mut con, "sem", 60_000, &["TOKEN", "s2", "LIMIT", "2"]);
    let mut waiter = Waiter::queue(&server, &mut con, "sem", 60_000, "w", &["LIMIT", "2"]);
    assert_eq!(
        hold(&mut con, "sem", 60_000, &["TOKEN", "s1", "LIMIT", "2"]),
        s1
    );
    assert_eq!(
        hold(
            &mut con,
            "sem",
            60_000,
            &["LIMIT", "2", "BLOCK", "0", "TOKEN", "s2"]
        ),
        s2
    );
    assert_eq!(holders(&mut con, "sem"), 2);
    assert_eq!(waiters(&mut con, "sem"), 1);
    waiter.assert_waiting("the retries took no permit");

    // The lease restarts even when shorter: s1's own lease now ends soon, and its
    // permit goes to the waiter while s2 keeps its own.
    assert_eq!(
        hold(&mut con, "sem", 200, &["TOKEN", "s1", "LIMIT", "2"]),
        s1
    );
    let (token, fence) = waiter.granted();
    assert_eq!(token, "w");
    assert!(fence > s2.1);
    assert_eq!(refresh(&mut con, "sem", "s1", 60_000), 0);
    assert_eq!(refresh(&mut con, "sem", "s2", 60_000), 1);
}

#[test]
fn fences_increase_across_holders_and_modes() {
    let server = Server::start();
    let mut con = server.connect();
    let mut fences = Vec::new();
    let mut take = |con: &mut Connection, key: &str, token: &str, mode: &[&str]| {
        let mut extra = vec!["TOKEN", token];
        extra.extend_from_slice(mode);
        let (_, fence) = hold(con, key, 60_000, &extra);
        fences.push(fence);
    };
    take(&mut con, "k", "x1", &[]);
    assert_eq!(release(&mut con, "k", "x1"), 1);
    take(&mut con, "k", "r1", &["SHARED"]);
    take(&mut con, "k", "r2", &["SHARED"]);
    take(&mut con, "other", "s1", &["LIMIT", "2"]);
    take(&mut con, "k", "r3", &["SHARED"]);
    assert_eq!(int(&mut con, &["DEL", "k"]), 1);
    take(&mut con, "k", "s1", &["LIMIT", "5"]);
    take(&mut con, "other", "s2", &["LIMIT", "2"]);
    take(&mut con, "k", "s2", &["LIMIT", "5"]);
    for token in ["s1", "s2"] {
        assert_eq!(release(&mut con, "k", token), 1);
    }
    take(&mut con, "k", "x2", &[]);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing over every grant: {fences:?}"
    );
}

#[test]
fn lock_fence_answers_each_holder_and_the_highest_without_a_token() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(fence(&mut con, "rw"), None);
    let (_, f1) = hold(&mut con, "rw", 60_000, &["TOKEN", "r1", "SHARED"]);
    let (_, f2) = hold(&mut con, "rw", 60_000, &["TOKEN", "r2", "SHARED"]);
    let (_, f3) = hold(&mut con, "rw", 200, &["TOKEN", "r3", "SHARED"]);
    assert_eq!(fence(&mut con, "rw"), Some(f3));
    for (token, f) in [("r1", f1), ("r2", f2), ("r3", f3)] {
        assert_eq!(fence_of(&mut con, "rw", token), Some(f), "{token}");
    }
    assert_eq!(fence_of(&mut con, "rw", "nobody"), None);
    // The highest *live* fence: r3's lease ends on its own.
    eventually(Duration::from_secs(3), "r3's lease ends", || {
        fence(&mut con, "rw") == Some(f2)
    });
    assert_eq!(fence_of(&mut con, "rw", "r3"), None);
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    assert_eq!(fence(&mut con, "rw"), Some(f1));
    assert_eq!(fence_of(&mut con, "rw", "r2"), None);
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    assert_eq!(fence(&mut con, "rw"), None);

    let (_, s1) = hold(&mut con, "sem", 60_000, &["TOKEN", "s1", "LIMIT", "2"]);
    let (_, s2) = hold(&mut con, "sem", 60_000, &["TOKEN", "s2", "LIMIT", "2"]);
    assert_eq!(fence(&mut con, "sem"), Some(s2));
    assert_eq!(fence_of(&mut con, "sem", "s1"), Some(s1));
    assert_eq!(release(&mut con, "sem", "s2"), 1);
    assert_eq!(fence(&mut con, "sem"), Some(s1));
}

#[test]
fn lock_info_reports_mode_holders_limit_and_waiters_in_order_never_tokens() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    assert!(
        raw.call_str(&["LOCK.INFO", "sem"]).is_nil(),
        "nil when free and nobody waits"
    );
    hold(
        &mut con,
        "sem",
        30_000,
        &["TOKEN", "secret-one", "LIMIT", "3"],
    );
    let (_, f2) = hold(
        &mut con,
        "sem",
        60_000,
        &["TOKEN", "secret-two", "LIMIT", "3"],
    );
    // A permit is free, but an exclusive acquirer waits for every holder, and a
    // shared one behind it waits too.
    let mut writer = Waiter::queue(&server, &mut con, "sem", 60_000, "secret-w", &[]);
    let _reader = Waiter::queue(
        &server,
        &mut con,
        "sem",
        60_000,
        "secret-r",
        &["LIMIT", "3"],
    );
    let reply = assert_info(
        &mut raw,
        "sem",
        &held_info(f2, 60_000, "semaphore", 2, Some(3), (1, 1)),
    );
    let shown = format!("{reply:?}");
    assert!(!shown.contains("secret"), "tokens are never shown: {shown}");

    let (_, r2) = {
        hold(&mut con, "rw", 60_000, &["TOKEN", "secret-a", "SHARED"]);
        hold(&mut con, "rw", 20_000, &["TOKEN", "secret-b", "SHARED"])
    };
    // ttl-ms is the key's PTTL: the latest lease, not the newest holder's.
    let reply = assert_info(
        &mut raw,
        "rw",
        &held_info(r2, 60_000, "shared", 2, None, (0, 0)),
    );
    assert!(!format!("{reply:?}").contains("secret"));

    let (_, x) = hold(&mut con, "ex", 10_000, &["TOKEN", "secret-x"]);
    assert_info(
        &mut raw,
        "ex",
        &held_info(x, 10_000, "exclusive", 1, None, (0, 0)),
    );

    // Both holders leave: the exclusive waiter holds, the reader still waits.
    assert_eq!(release(&mut con, "sem", "secret-one"), 1);
    assert_eq!(release(&mut con, "sem", "secret-two"), 1);
    let (_, w) = writer.granted();
    assert_info(
        &mut raw,
        "sem",
        &held_info(w, 60_000, "exclusive", 1, None, (0, 1)),
    );
}

// ---------------------------------------------------------------------------------
// Events, key lifetime, guards

/// The next `n` `lock.*` events as (key, event), from a PSUBSCRIBE'd raw client.
fn next_events(subscriber: &mut RawClient, n: usize) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    while seen.len() < n {
        let reply = subscriber.try_read_reply(Duration::from_secs(5));
        let Some(Reply::Array(Some(message))) = reply else {
            panic!("no further event after {seen:?}: {reply:?}")
        };
        let (Some(channel), Some(event)) = (text(&message[2]), text(&message[3])) else {
            panic!("{message:?}")
        };
        if event.starts_with("lock.") {
            let key = channel.trim_start_matches("__keyspace@0__:").to_string();
            seen.push((key, event));
        }
    }
    seen
}

#[test]
fn keyspace_events_are_emitted_per_holder() {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber =
        keyspace_subscriber(&server, &mut con, &["PSUBSCRIBE", "__keyspace@0__:lock:*"]);
    let event = |e: &str| ("lock:rw".to_string(), e.to_string());

    hold(&mut con, "lock:rw", 60_000, &["TOKEN", "r1", "SHARED"]);
    hold(&mut con, "lock:rw", 60_000, &["TOKEN", "r2", "SHARED"]);
    assert_eq!(refresh(&mut con, "lock:rw", "r1", 60_000), 1);
    let mut writer = Waiter::queue(&server, &mut con, "lock:rw", 60_000, "w", &[]);
    assert_eq!(release(&mut con, "lock:rw", "r1"), 1);
    assert_eq!(release(&mut con, "lock:rw", "r2"), 1);
    writer.granted();
    // Two readers queued behind the writer; the first one's lease is short.
    let mut r3 = Waiter::queue(&server, &mut con, "lock:rw", 100, "r3", &["SHARED"]);
    let mut r4 = Waiter::queue(&server, &mut con, "lock:rw", 60_000, "r4", &["SHARED"]);
    assert_eq!(release(&mut con, "lock:rw", "w"), 1);
    r3.granted();
    r4.granted();

    assert_eq!(
        next_events(&mut subscriber, 8),
        [
            event("lock.acquired"),
            event("lock.acquired"),
            event("lock.refreshed"),
            event("lock.released"),
            // The last reader leaves and the writer is handed the lock.
            event("lock.released"),
            event("lock.acquired"),
            event("lock.handoff"),
            event("lock.released"),
        ]
    );
    // Each of the two readers granted together is acquired and handed off.
    let mut together = next_events(&mut subscriber, 4);
    together.sort();
    assert_eq!(
        together,
        [
            event("lock.acquired"),
            event("lock.acquired"),
            event("lock.handoff"),
            event("lock.handoff"),
        ]
    );
    // r3's own lease ends while r4 holds on.
    assert_eq!(next_events(&mut subscriber, 1), [event("lock.expired")]);
    assert_eq!(refresh(&mut con, "lock:rw", "r3", 60_000), 0);
    assert_eq!(refresh(&mut con, "lock:rw", "r4", 60_000), 1);
    assert_eq!(
        next_events(&mut subscriber, 1),
        [event("lock.refreshed")],
        "the ended holder's refresh announces nothing"
    );
}

fn pttl_between(con: &mut Connection, key: &str, low: i64, high: i64) {
    let pttl = int(con, &["PTTL", key]);
    assert!(
        pttl > low && pttl <= high,
        "PTTL {key} {pttl} not in ({low}, {high}]"
    );
}

#[test]
fn pttl_is_the_latest_lease_and_the_last_holder_leaves_no_key() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "sem", 30_000, &["TOKEN", "s1", "LIMIT", "2"]);
    hold(&mut con, "sem", 60_000, &["TOKEN", "s2", "LIMIT", "2"]);
    pttl_between(&mut con, "sem", 55_000, 60_000);
    assert_eq!(refresh(&mut con, "sem", "s1", 90_000), 1);
    pttl_between(&mut con, "sem", 85_000, 90_000);
    assert_eq!(refresh(&mut con, "sem", "s1", 10_000), 1);
    pttl_between(&mut con, "sem", 50_000, 60_000);
    assert_eq!(
        int(&mut con, &["LOCK.REFRESH", "sem", "s1", "80000", "ADD"]),
        1
    );
    pttl_between(&mut con, "sem", 85_000, 90_000);
    assert_eq!(release(&mut con, "sem", "s1"), 1);
    pttl_between(&mut con, "sem", 55_000, 60_000);
    let kind: String = cmd("TYPE").arg("sem").query(&mut con).unwrap();
    assert_eq!(kind, "fencelock");
    assert_eq!(release(&mut con, "sem", "s2"), 1);
    assert_eq!(
        int(&mut con, &["EXISTS", "sem"]),
        0,
        "no key after the last"
    );

    // Leases that run out one by one: the key goes with the last of them.
    hold(&mut con, "rw", 100, &["TOKEN", "r1", "SHARED"]);
    hold(&mut con, "rw", 300, &["TOKEN", "r2", "SHARED"]);
    eventually(Duration::from_secs(3), "r1's lease ends", || {
        holders(&mut con, "rw") == 1
    });
    assert_eq!(int(&mut con, &["EXISTS", "rw"]), 1, "r2 still holds");
    eventually(Duration::from_secs(3), "r2's lease ends", || {
        int(&mut con, &["EXISTS", "rw"]) == 0
    });
    let size: i64 = cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, 0);
    assert_eq!(
        cmd("LOCK.INFO")
            .arg("rw")
            .query::<Option<Vec<Value>>>(&mut con)
            .unwrap(),
        None
    );
}

#[test]
fn a_guard_runs_for_any_live_shared_holders_token() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    for (token, ttl) in [("r1", "60000"), ("r2", "60000"), ("r3", "200")] {
        assert!(
            acquire_raw(&mut raw, "lock:{d}", ttl, &["TOKEN", token, "SHARED"])
                .grant()
                .is_some()
        );
    }
    let guard = |raw: &mut RawClient, token: &str, argv: &[&str]| {
        let mut full = vec!["LOCK.GUARD", "lock:{d}", token];
        full.extend_from_slice(argv);
        raw.call_str(&full)
    };
    assert!(guard(&mut raw, "r1", &["SET", "{d}:data", "1"]).is_ok());
    assert_eq!(
        guard(&mut raw, "r2", &["INCR", "{d}:data"]),
        Reply::Integer(2)
    );
    assert_eq!(
        guard(&mut raw, "r3", &["INCR", "{d}:data"]),
        Reply::Integer(3)
    );
    assert_eq!(
        guard(&mut raw, "nobody", &["SET", "{d}:data", "0"]),
        err(NOT_HELD)
    );
    assert_eq!(release(&mut con, "lock:{d}", "r1"), 1);
    assert_eq!(
        guard(&mut raw, "r1", &["SET", "{d}:data", "0"]),
        err(NOT_HELD),
        "released"
    );
    eventually(Duration::from_secs(3), "r3's own lease ends", || {
        guard(&mut raw, "r3", &["GET", "{d}:data"]) == err(NOT_HELD)
    });
    assert_eq!(
        guard(&mut raw, "r2", &["GET", "{d}:data"]),
        Reply::Bulk(Some(b"3".to_vec())),
        "the others still write"
    );

    assert!(acquire_raw(
        &mut raw,
        "lock:{d}s",
        "60000",
        &["TOKEN", "s", "LIMIT", "2"]
    )
    .grant()
    .is_some());
    assert!(raw
        .call_str(&["LOCK.GUARD", "lock:{d}s", "s", "SET", "{d}:other", "x"])
        .is_ok());
}

// ---------------------------------------------------------------------------------
// Configs, MULTI, CLIENT UNBLOCK, queue rules

#[test]
fn max_holders_bounds_limits_and_caps_shared_locks() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(config_get(&mut con, "fencelock.max-holders"), "10000");
    for value in ["0", "1000001", "-1"] {
        assert_eq!(
            raw.call_str(&["CONFIG", "SET", "fencelock.max-holders", value]),
            err(
                "ERR CONFIG SET failed (possibly related to argument 'fencelock.max-holders') - \
                 argument must be between 1 and 1000000 inclusive"
            ),
            "{value}"
        );
    }
    assert_eq!(config_get(&mut con, "fencelock.max-holders"), "10000");
    assert!(raw
        .call_str(&["CONFIG", "SET", "fencelock.max-holders", "1000000"])
        .is_ok());
    assert!(acquire_raw(&mut raw, "big", "1000", &["LIMIT", "1000000"])
        .grant()
        .is_some());
    assert!(raw
        .call_str(&["CONFIG", "SET", "fencelock.max-holders", "3"])
        .is_ok());
    assert_eq!(
        acquire_raw(&mut raw, "sem", "1000", &["LIMIT", "4"]),
        err(BAD_LIMIT)
    );
    assert!(acquire_raw(&mut raw, "sem", "60000", &["LIMIT", "3"])
        .grant()
        .is_some());
    // A shared lock without LIMIT is capped at max-holders: busy, then served in turn.
    for token in ["r1", "r2", "r3"] {
        hold(&mut con, "rw", 60_000, &["TOKEN", token, "SHARED"]);
    }
    assert_eq!(
        acquire(&mut con, "rw", 60_000, &["TOKEN", "r4", "SHARED"]),
        None
    );
    let mut r4 = Waiter::queue(&server, &mut con, "rw", 60_000, "r4", &["SHARED"]);
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    assert_eq!(r4.granted().0, "r4");
    assert_eq!(holders(&mut con, "rw"), 3);
}

#[test]
fn max_holders_is_a_loadmodule_argument() {
    let server = Server::with_module_args(&[], &["max-holders", "2"]);
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(config_get(&mut con, "fencelock.max-holders"), "2");
    assert_eq!(
        acquire_raw(&mut raw, "sem", "1000", &["LIMIT", "3"]),
        err(BAD_LIMIT)
    );
    hold(&mut con, "rw", 60_000, &["SHARED"]);
    hold(&mut con, "rw", 60_000, &["SHARED"]);
    assert_eq!(acquire(&mut con, "rw", 60_000, &["SHARED"]), None);
}

#[test]
fn block_does_not_block_shared_acquires_inside_multi_or_scripts() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "rw", 60_000, &["TOKEN", "x"]);
    hold(&mut con, "sem", 60_000, &["TOKEN", "s", "LIMIT", "1"]);
    let started = Instant::now();
    let (rw, sem, free): (Grant, Grant, Grant) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("rw")
        .arg(1000)
        .arg("SHARED")
        .arg("BLOCK")
        .arg(0)
        .cmd("LOCK.ACQUIRE")
        .arg("sem")
        .arg(1000)
        .arg("LIMIT")
        .arg(1)
        .arg("BLOCK")
        .arg(0)
        .cmd("LOCK.ACQUIRE")
        .arg("free")
        .arg(1000)
        .arg("LIMIT")
        .arg(2)
        .arg("BLOCK")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!((rw, sem), (None, None), "busy answers nil at once");
    assert!(free.is_some(), "granted at once when a permit is free");
    let script: Option<Vec<Value>> = cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 1000, 'SHARED', 'BLOCK', 0)")
        .arg(1)
        .arg("rw")
        .query(&mut con)
        .unwrap();
    assert_eq!(script, None);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(waiters(&mut con, "rw"), 0);
    assert_eq!(waiters(&mut con, "sem"), 0);
}

#[test]
fn client_unblock_ends_a_shared_wait() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "rw", 60_000, &["TOKEN", "x"]);
    hold(&mut con, "sem", 60_000, &["TOKEN", "s", "LIMIT", "1"]);
    for (key, mode, unblock, expected) in [
        ("rw", "SHARED", None, Reply::Bulk(None)),
        ("sem", "LIMIT", None, Reply::Bulk(None)),
        (
            "sem",
            "LIMIT",
            Some("ERROR"),
            err("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
        ),
    ] {
        let mut waiter = RawClient::connect(server.port);
        let Reply::Integer(id) = waiter.call_str(&["CLIENT", "ID"]) else {
            panic!("CLIENT ID")
        };
        let mut argv = vec!["LOCK.ACQUIRE", key, "1000", "BLOCK", "0", mode];
        if mode == "LIMIT" {
            argv.push("1");
        }
        waiter.send_pipeline(&[&argv]);
        wait_for_waiters(&mut con, key, 1);
        let mut command = cmd("CLIENT");
        command.arg("UNBLOCK").arg(id);
        if let Some(how) = unblock {
            command.arg(how);
        }
        assert_eq!(command.query::<i64>(&mut con).unwrap(), 1);
        let reply = waiter.read_reply();
        if expected.is_nil() {
            assert!(reply.is_nil(), "{key} {unblock:?}: {reply:?}");
        } else {
            assert_eq!(reply, expected, "{key} {unblock:?}");
        }
        assert_eq!(waiters(&mut con, key), 0);
        assert_eq!(waiter.call_str(&["PING"]), Reply::Status("PONG".into()));
    }
    // Nobody is left to hand the lock to.
    assert_eq!(release(&mut con, "rw", "x"), 1);
    assert_eq!(int(&mut con, &["EXISTS", "rw"]), 0);
}

#[test]
fn a_queued_waiter_whose_mode_no_longer_matches_gets_wrongmode_at_its_turn() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "k1", 60_000, &["TOKEN", "x"]);
    let mut a = Waiter::queue(&server, &mut con, "k1", 60_000, "a", &["LIMIT", "2"]);
    let mut b = Waiter::queue(&server, &mut con, "k1", 60_000, "b", &["LIMIT", "3"]);
    let mut c = Waiter::queue(&server, &mut con, "k1", 60_000, "c", &["LIMIT", "2"]);
    let mut d = Waiter::queue(&server, &mut con, "k1", 60_000, "d", &["LIMIT", "2"]);
    assert_eq!(release(&mut con, "k1", "x"), 1);
    assert_eq!(a.granted().0, "a");
    assert_eq!(
        b.reply(Duration::from_secs(5)),
        err("WRONGMODE k1 is a semaphore with limit 2")
    );
    assert_eq!(c.granted().0, "c", "the next waiter that fits is served");
    d.assert_waiting("the semaphore of 2 is full");
    assert_eq!(holders(&mut con, "k1"), 2);
    assert_eq!(fence_of(&mut con, "k1", "b"), None);

    hold(&mut con, "k2", 60_000, &["TOKEN", "x"]);
    let mut a = Waiter::queue(&server, &mut con, "k2", 60_000, "a", &["SHARED"]);
    let mut b = Waiter::queue(&server, &mut con, "k2", 60_000, "b", &["LIMIT", "2"]);
    let mut c = Waiter::queue(&server, &mut con, "k2", 60_000, "c", &["SHARED"]);
    assert_eq!(release(&mut con, "k2", "x"), 1);
    assert_eq!(a.granted().0, "a");
    assert_eq!(
        b.reply(Duration::from_secs(5)),
        err("WRONGMODE k2 is held shared")
    );
    assert_eq!(c.granted().0, "c");
    assert_eq!(holders(&mut con, "k2"), 2);
    assert_eq!(waiters(&mut con, "k2"), 0);
}

#[test]
fn max_waiters_applies_to_shared_waiters() {
    let server = Server::with_module_args(&[], &["max-waiters", "2"]);
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    hold(&mut con, "rw", 60_000, &["TOKEN", "x"]);
    let _a = Waiter::queue(&server, &mut con, "rw", 1_000, "a", &["SHARED"]);
    let _b = Waiter::queue(&server, &mut con, "rw", 1_000, "b", &["LIMIT", "2"]);
    assert_eq!(
        acquire_raw(&mut raw, "rw", "1000", &["SHARED", "BLOCK", "0"]),
        err("ERR too many waiters")
    );
    assert_eq!(
        acquire_raw(&mut raw, "rw", "1000", &["LIMIT", "2", "BLOCK", "100"]),
        err("ERR too many waiters")
    );
    assert_eq!(
        acquire_raw(&mut raw, "rw", "1000", &["SHARED"]),
        Reply::Bulk(None),
        "without BLOCK still nil"
    );
    assert_eq!(waiters(&mut con, "rw"), 2);

    hold(&mut con, "sem", 60_000, &["TOKEN", "s", "LIMIT", "1"]);
    let _c = Waiter::queue(&server, &mut con, "sem", 1_000, "c", &["LIMIT", "1"]);
    let _d = Waiter::queue(&server, &mut con, "sem", 1_000, "d", &[]);
    assert_eq!(
        acquire_raw(&mut raw, "sem", "1000", &["LIMIT", "1", "BLOCK", "0"]),
        err("ERR too many waiters")
    );
}

#[test]
fn an_ended_holder_stops_counting_at_once_even_while_writes_are_paused() {
    let server = Server::start();
    let mut con = server.connect();
    let (_, a) = hold(&mut con, "sem", 100, &["TOKEN", "a", "LIMIT", "3"]);
    let (_, b) = hold(&mut con, "sem", 60_000, &["TOKEN", "b", "LIMIT", "3"]);
    assert!(b > a);
    let (_, r) = hold(&mut con, "rw", 60_000, &["TOKEN", "r", "SHARED"]);
    let (_, late) = hold(&mut con, "rw", 100, &["TOKEN", "late", "SHARED"]);
    assert_eq!(fence(&mut con, "rw"), Some(late));
    // Nothing can write (and so nothing can drop a holder) for 1.5 s; reads still run.
    let _: () = cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_500)
        .arg("WRITE")
        .query(&mut con)
        .unwrap();
    let paused_at = Instant::now();
    eventually(
        Duration::from_millis(1_000),
        "the ended holders no longer count for reads",
        || {
            fence_of(&mut con, "sem", "a").is_none()
                && holders(&mut con, "sem") == 1
                && fence(&mut con, "rw") == Some(r)
                && holders(&mut con, "rw") == 1
        },
    );
    assert!(
        paused_at.elapsed() < Duration::from_millis(1_500),
        "while paused"
    );
    assert_eq!(fence(&mut con, "sem"), Some(b));
    let _: () = cmd("CLIENT").arg("UNPAUSE").query(&mut con).unwrap();
    assert_eq!(refresh(&mut con, "sem", "a", 60_000), 0);
    assert_eq!(refresh(&mut con, "rw", "late", 60_000), 0);
    assert_eq!(refresh(&mut con, "sem", "b", 60_000), 1);
}

/// An exclusive acquirer waits for the holder and a shared one queues behind it, although
/// it would fit; then the exclusive one stops waiting (`how`). What the shared one got
/// within a second.
fn reader_behind_a_writer_that_leaves(
    server: &Server,
    con: &mut Connection,
    key: &str,
    mode: &[&str],
    how: &str,
) -> Option<Reply> {
    let mut holder = vec!["TOKEN", "first"];
    holder.extend_from_slice(mode);
    hold(con, key, 60_000, &holder);
    let mut writer = RawClient::connect(server.port);
    let Reply::Integer(writer_id) = writer.call_str(&["CLIENT", "ID"]) else {
        panic!("CLIENT ID")
    };
    let timeout = if how == "timeout" { "200" } else { "0" };
    writer.send_pipeline(&[&["LOCK.ACQUIRE", key, "60000", "TOKEN", "w", "BLOCK", timeout]]);
    wait_for_waiters(con, key, 1);
    let mut reader = Waiter::queue(server, con, key, 60_000, "second", mode);
    match how {
        "timeout" => assert!(writer
            .try_read_reply(Duration::from_secs(3))
            .expect("the writer's BLOCK timed out")
            .is_nil()),
        "unblock" => {
            let unblocked: i64 = cmd("CLIENT")
                .arg("UNBLOCK")
                .arg(writer_id)
                .query(con)
                .unwrap();
            assert_eq!(unblocked, 1);
            assert!(writer.read_reply().is_nil());
        }
        // The reader's own reply shows when the server noticed the writer left.
        _ => drop(writer),
    }
    reader.0.try_read_reply(Duration::from_secs(1))
}

#[test]
fn waiters_behind_one_that_stops_waiting_are_granted_at_once_if_they_fit() {
    let server = Server::start();
    let mut con = server.connect();
    let mut stuck = Vec::new();
    for (kind, mode) in [("rw", vec!["SHARED"]), ("sem", vec!["LIMIT", "2"])] {
        for how in ["timeout", "unblock", "disconnect"] {
            let key = format!("{kind}-{how}");
            let reply = reader_behind_a_writer_that_leaves(&server, &mut con, &key, &mode, how);
            match reply.as_ref().and_then(Reply::grant) {
                Some((token, _)) => {
                    assert_eq!(token, b"second");
                    assert_eq!(holders(&mut con, &key), 2, "{key}");
                    assert_eq!(waiters(&mut con, &key), 0, "{key}");
                }
                None => stuck.push(format!("{key}: {reply:?}")),
            }
        }
    }
    assert!(
        stuck.is_empty(),
        "shared waiters left waiting although they fit: {stuck:?}"
    );
}

#[test]
fn lock_apply_and_lock_drop_add_and_remove_one_holder() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let deadline = (now_ms() + 60_000).to_string();
    for (token, fence) in [("t1", "9000000000000001"), ("t2", "9000000000000002")] {
        let reply = raw.call_str(&[
            "LOCK.APPLY",
            "sem",
            token,
            fence,
            "PXAT",
            &deadline,
            "LIMIT",
            "2",
        ]);
        assert!(!matches!(reply, Reply::Error(_)), "{reply:?}");
    }
    assert!(!matches!(
        raw.call_str(&[
            "LOCK.APPLY",
            "rw",
            "r",
            "9000000000000003",
            "PXAT",
            &deadline,
            "SHARED"
        ]),
        Reply::Error(_)
    ));
    assert_eq!(fence_of(&mut con, "sem", "t1"), Some(9_000_000_000_000_001));
    assert_eq!(fence(&mut con, "sem"), Some(9_000_000_000_000_002));
    assert_info(
        &mut raw,
        "sem",
        &held_info(
            9_000_000_000_000_002,
            60_000,
            "semaphore",
            2,
            Some(2),
            (0, 0),
        ),
    );
    assert_info(
        &mut raw,
        "rw",
        &held_info(9_000_000_000_000_003, 60_000, "shared", 1, None, (0, 0)),
    );
    assert_eq!(int(&mut con, &["PEXPIRETIME", "sem"]).to_string(), deadline);
    assert_eq!(int(&mut con, &["LOCK.DROP", "sem", "t1"]), 1);
    assert_eq!(int(&mut con, &["LOCK.DROP", "sem", "t1"]), 0);
    assert_eq!(holders(&mut con, "sem"), 1);
    assert_eq!(int(&mut con, &["LOCK.DROP", "sem", "t2"]), 1);
    assert_eq!(
        int(&mut con, &["EXISTS", "sem"]),
        0,
        "the last one leaves no key"
    );
    // The fence clock was raised past the applied fences.
    let (_, next) = hold(&mut con, "sem", 1_000, &["LIMIT", "2"]);
    assert!(next > 9_000_000_000_000_003);
}

#[test]
fn a_refresh_that_shortens_one_holders_lease_hands_its_permit_on_when_it_ends() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "sem", 60_000, &["TOKEN", "a", "LIMIT", "2"]);
    hold(&mut con, "sem", 60_000, &["TOKEN", "b", "LIMIT", "2"]);
    let mut waiter = Waiter::queue(&server, &mut con, "sem", 60_000, "w", &["LIMIT", "2"]);
    let started = Instant::now();
    assert_eq!(refresh(&mut con, "sem", "a", 200), 1);
    assert_eq!(waiter.granted().0, "w");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_secs(2),
        "served when a's new lease ends: {waited:?}"
    );
    assert_eq!(refresh(&mut con, "sem", "b", 60_000), 1);
    assert_eq!(refresh(&mut con, "sem", "a", 60_000), 0);
}

#[test]
fn unlinking_or_flushing_a_read_locked_key_hands_it_to_the_queued_writer() {
    let server = Server::start();
    let mut con = server.connect();
    for wipe in ["UNLINK", "FLUSHALL"] {
        let (_, r1) = hold(&mut con, "rw", 60_000, &["TOKEN", "r1", "SHARED"]);
        hold(&mut con, "rw", 60_000, &["TOKEN", "r2", "SHARED"]);
        let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "w", &[]);
        let mut wipe_cmd = cmd(wipe);
        if wipe == "UNLINK" {
            wipe_cmd.arg("rw");
        }
        let _: Value = wipe_cmd.query(&mut con).unwrap();
        let (token, fence) = writer.granted();
        assert_eq!(token, "w", "{wipe}");
        assert!(fence > r1);
        assert_eq!(refresh(&mut con, "rw", "r2", 60_000), 0, "{wipe}");
        assert_eq!(release(&mut con, "rw", "w"), 1, "{wipe}");
    }
}

#[test]
fn a_shared_lock_goes_with_its_last_holder_after_persist_or_a_longer_pexpire() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "persisted", 300, &["SHARED"]);
    assert_eq!(int(&mut con, &["PERSIST", "persisted"]), 1);
    hold(&mut con, "stretched", 300, &["LIMIT", "2"]);
    let (late, _) = hold(&mut con, "stretched", 700, &["LIMIT", "2"]);
    assert_eq!(int(&mut con, &["PEXPIRE", "stretched", "100000"]), 1);
    // The first holder of "stretched" ends on its own; the key then follows the
    // latest lease again.
    eventually(
        Duration::from_secs(2),
        "expiry back to the latest lease",
        || int(&mut con, &["PTTL", "stretched"]) <= 700,
    );
    assert_eq!(holders(&mut con, "stretched"), 1);
    assert_eq!(refresh(&mut con, "stretched", &late, 700), 1);
    // A lone holder whose key a PEXPIRE stretched: the key goes with the holder, and
    // the held-locks gauge with it.
    hold(&mut con, "lone", 300, &["SHARED"]);
    assert_eq!(int(&mut con, &["PEXPIRE", "lone", "30000"]), 1);
    eventually(
        Duration::from_secs(3),
        "no key left after the last holder",
        || int(&mut con, &["EXISTS", "persisted", "stretched", "lone"]) == 0,
    );
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_held_locks").as_deref(),
        Some("0")
    );
}

#[test]
fn a_shortened_expiry_of_a_shared_lock_serves_its_waiters_when_it_ends() {
    let server = Server::start();
    let mut con = server.connect();
    for mode in [&["SHARED"][..], &["LIMIT", "1"][..]] {
        let key = format!("short:{}", mode[0]);
        hold(&mut con, &key, 30_000, mode);
        let mut writer = Waiter::queue(&server, &mut con, &key, 30_000, "writer", &[]);
        assert_eq!(int(&mut con, &["PEXPIRE", &key, "150"]), 1);
        let asked = Instant::now();
        granted(&writer.reply(Duration::from_secs(2)));
        let late = asked.elapsed().saturating_sub(Duration::from_millis(150));
        assert!(
            late < Duration::from_millis(25),
            "{key}: served {late:?} after the key's end"
        );
    }
}

#[test]
fn a_restored_shared_lock_whose_leases_ended_leaves_no_key() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "src", 200, &["SHARED"]);
    let dump: Vec<u8> = cmd("DUMP").arg("src").query(&mut con).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let _: () = cmd("RESTORE")
        .arg("dst")
        .arg(0)
        .arg(dump)
        .query(&mut con)
        .unwrap();
    eventually(
        Duration::from_secs(2),
        "the restored, emptied lock goes",
        || int(&mut con, &["EXISTS", "dst"]) == 0,
    );
}

#[test]
fn holders_ending_with_the_key_each_get_their_lock_expired() {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber =
        keyspace_subscriber(&server, &mut con, &["PSUBSCRIBE", "__keyspace@0__:lock:*"]);
    let expired_before = info_field(&mut con, "fencelock", "fencelock_expired")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap();
    // One transaction: the three leases end in the same millisecond as the key.
    let mut pipe = redis::pipe();
    pipe.atomic();
    for token in ["a", "b", "c"] {
        pipe.cmd("LOCK.ACQUIRE")
            .arg("lock:same")
            .arg(200)
            .arg("TOKEN")
            .arg(token)
            .arg("SHARED")
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let events = next_events(&mut subscriber, 6);
    let expired = events.iter().filter(|(_, e)| e == "lock.expired").count();
    assert_eq!(expired, 3, "{events:?}");
    let expired_after = info_field(&mut con, "fencelock", "fencelock_expired")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap();
    assert_eq!(expired_after - expired_before, 3);
}

#[test]
fn a_persisted_then_renamed_shared_lock_goes_with_its_last_holder() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "r", 300, &["TOKEN", "a", "SHARED"]);
    hold(&mut con, "r", 600, &["TOKEN", "b", "SHARED"]);
    assert_eq!(int(&mut con, &["PERSIST", "r"]), 1);
    let _: () = cmd("RENAME").arg("r").arg("r2").query(&mut con).unwrap();
    eventually(
        Duration::from_secs(3),
        "no key left after the last holder",
        || int(&mut con, &["EXISTS", "r2"]) == 0,
    );
}

#[test]
fn restoring_a_lock_with_many_holders_is_not_quadratic() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("fencelock.max-holders")
        .arg(40_000)
        .query(&mut con)
        .unwrap();
    for _ in 0..8 {
        let mut pipe = redis::pipe();
        for _ in 0..5_000 {
            pipe.cmd("LOCK.ACQUIRE")
                .arg("big")
                .arg(600_000)
                .arg("SHARED")
                .ignore();
        }
        let _: () = pipe.query(&mut con).unwrap();
    }
    let dump: Vec<u8> = cmd("DUMP").arg("big").query(&mut con).unwrap();
    let started = Instant::now();
    let _: () = cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(dump)
        .query(&mut con)
        .unwrap();
    let took = started.elapsed();
    assert_eq!(holders(&mut con, "copy"), 40_000);
    // Checking 40,000 holders pairwise took ~2 s; sorted, a few ms.
    assert!(
        took < Duration::from_millis(400),
        "RESTORE of 40,000 holders took {took:?}"
    );
}

#[test]
fn holders_written_by_lock_apply_are_announced_at_their_own_lease_end() {
    let server = Server::start();
    let mut con = server.connect();
    let mut subscriber =
        keyspace_subscriber(&server, &mut con, &["PSUBSCRIBE", "__keyspace@0__:lock:*"]);
    let now = now_ms();
    for (token, fence, lease) in [("a", "1", 300), ("b", "2", 3_000)] {
        let deadline = (now + lease).to_string();
        let argv = [
            "LOCK.APPLY",
            "lock:applied",
            token,
            fence,
            "PXAT",
            &deadline,
            "SHARED",
        ];
        let _: () = cmd(argv[0]).arg(&argv[1..]).query(&mut con).unwrap();
    }
    let started = Instant::now();
    let events = next_events(&mut subscriber, 1);
    assert_eq!(events[0].1, "lock.expired");
    assert!(
        started.elapsed() < Duration::from_millis(1_000),
        "a's end announced after {:?}",
        started.elapsed()
    );
    assert_eq!(holders(&mut con, "lock:applied"), 1);
}

/// Every grant has its own fence, so two holders of one key never share one: an
/// explicit `LOCK.APPLY` that would make them is refused and changes nothing.
#[test]
fn lock_apply_refuses_a_fence_another_holder_has() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    let deadline = (now_ms() + 60_000).to_string();
    let apply = |raw: &mut RawClient, token: &str, fence: &str| {
        raw.call_str(&[
            "LOCK.APPLY",
            "rw",
            token,
            fence,
            "PXAT",
            &deadline,
            "SHARED",
        ])
    };
    assert!(apply(&mut raw, "a", "5").is_ok());
    let before = raw.call_str(&["DEBUG", "DIGEST-VALUE", "rw"]);
    assert_eq!(
        apply(&mut raw, "b", "5"),
        err("ERR another holder of the lock has this fence")
    );
    assert_eq!(raw.call_str(&["DEBUG", "DIGEST-VALUE", "rw"]), before);
    // The holder itself may be re-applied, with its own fence or the one it had.
    assert!(apply(&mut raw, "a", "5").is_ok());
    assert!(apply(&mut raw, "b", "6").is_ok());
}

/// Inside `MULTI` (and scripts) Redis judges key expiry by the time the transaction
/// started, so an exclusive lease that ends during one still holds to its end; a shared
/// holder's own lease follows the same rule, on servers that tell modules that time
/// (Redis 7.2 and later, Valkey). Redis 7.0 does not: there a shared holder's lease is
/// judged by the wall clock, as the README says.
#[test]
fn inside_multi_every_lease_is_judged_by_the_transaction_time() {
    let server = Server::start();
    let mut con = server.connect();
    let frozen = !info_field(&mut con, "server", "redis_version")
        .is_some_and(|version| version.starts_with("7.0."))
        || info_field(&mut con, "server", "valkey_version").is_some();
    acquire(&mut con, "x", 100, &["TOKEN", "a"]).unwrap();
    acquire(&mut con, "s", 100, &["SHARED", "TOKEN", "a"]).unwrap();
    let (x_fence, s_fence) = (fence(&mut con, "x"), fence(&mut con, "s"));
    let during: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.2")
        .ignore()
        .cmd("LOCK.FENCE")
        .arg("x")
        .arg("a")
        .cmd("LOCK.FENCE")
        .arg("s")
        .arg("a")
        .cmd("LOCK.ACQUIRE")
        .arg("x")
        .arg(1_000)
        .arg("TOKEN")
        .arg("b")
        .cmd("LOCK.ACQUIRE")
        .arg("s")
        .arg(1_000)
        .arg("TOKEN")
        .arg("b")
        .query(&mut con)
        .unwrap();
    let fence_reply = |value: &Value| match value {
        Value::Int(fence) => Some(*fence),
        _ => None,
    };
    assert_eq!(
        fence_reply(&during[0]),
        x_fence,
        "the exclusive lease still holds"
    );
    assert_eq!(during[2], Value::Nil, "so the exclusive lock is busy");
    if frozen {
        assert_eq!(fence_reply(&during[1]), s_fence, "the shared lease too");
        assert_eq!(during[3], Value::Nil, "and the shared lock is busy");
        // After the transaction both leases have ended.
        assert_eq!(fence(&mut con, "s"), None);
    } else {
        assert_eq!(during[1], Value::Nil, "Redis 7.0: the wall clock");
    }
    assert_eq!(fence(&mut con, "x"), None);
}

/// `fencelock_expired` now.
fn expired_count(con: &mut Connection) -> i64 {
    info_field(con, "fencelock", "fencelock_expired")
        .and_then(|v| v.parse().ok())
        .expect("fencelock_expired")
}

/// A shared holder whose lease ends before the key's still leaves on time after the
/// key moved to another database (`MOVE`, or `SWAPDB` of its database): it is dropped
/// there, with `lock.expired`, without anyone touching the lock.
#[test]
fn a_holders_own_lease_end_follows_the_key_to_another_database() {
    let server = Server::start();
    let mut con = server.connect();
    for (key, how) in [("moved", "MOVE"), ("swapped", "SWAPDB")] {
        let _: () = cmd("SELECT").arg(0).query(&mut con).unwrap();
        hold(&mut con, key, 200, &["SHARED", "TOKEN", "short"]);
        hold(&mut con, key, 60_000, &["SHARED", "TOKEN", "long"]);
        let before = expired_count(&mut con);
        if how == "MOVE" {
            assert_eq!(int(&mut con, &["MOVE", key, "3"]), 1);
        } else {
            let _: () = cmd("SWAPDB").arg(0).arg(3).query(&mut con).unwrap();
        }
        let _: () = cmd("SELECT").arg(3).query(&mut con).unwrap();
        eventually(Duration::from_secs(3), "the short lease dropped", || {
            expired_count(&mut con) == before + 1
        });
        // Only the long holder is left in the key itself (its digest changed).
        assert_eq!(holders(&mut con, key), 1, "{how}");
        assert_eq!(release(&mut con, key, "short"), 0, "{how}");
        assert_eq!(release(&mut con, key, "long"), 1, "{how}");
        if how == "SWAPDB" {
            let _: () = cmd("SWAPDB").arg(0).arg(3).query(&mut con).unwrap();
        }
    }
}

/// A shared lock deleted or released before its earliest lease would end gives its
/// lease-end timer back at once: thousands of them leave no memory behind.
#[test]
fn a_shared_lock_that_goes_early_leaves_no_timer_behind() {
    let server = Server::start();
    let mut con = server.connect();
    let round = |con: &mut Connection, prefix: &str| {
        let mut pipe = redis::pipe();
        for i in 0..5_000 {
            let key = format!("{prefix}:{i}");
            for (token, ttl) in [("a", 300_000), ("b", 600_000)] {
                pipe.cmd("LOCK.ACQUIRE")
                    .arg(&key)
                    .arg(ttl)
                    .arg("SHARED")
                    .arg("TOKEN")
                    .arg(token)
                    .ignore();
            }
            if i % 2 == 0 {
                pipe.cmd("DEL").arg(&key).ignore();
            } else {
                for token in ["a", "b"] {
                    pipe.cmd("LOCK.RELEASE").arg(&key).arg(token).ignore();
                }
            }
        }
        let _: () = pipe.query(con).unwrap();
    };
    round(&mut con, "warm");
    std::thread::sleep(Duration::from_millis(200));
    let baseline: i64 = info_field(&mut con, "memory", "used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap();
    round(&mut con, "again");
    std::thread::sleep(Duration::from_millis(200));
    let after: i64 = info_field(&mut con, "memory", "used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(
        after - baseline < 100_000,
        "{} bytes left behind by 5,000 deleted shared locks",
        after - baseline
    );
}
