//! Shared holders: semaphores (`LIMIT n`) and read-write locks (`SHARED`), one file per
//! topic: [`semaphores`], [`readers_writers`], [`modes`] (`WRONGMODE`, limit errors and
//! same-token retries), [`queue`] (FIFO waiting across modes), [`leases`] (each
//! holder's own lease and the key's lifetime), [`effects`] (`LOCK.APPLY`/`LOCK.DROP`),
//! [`configs`] (`fencelock.max-holders`) and [`replies`] (fences, `LOCK.FENCE`,
//! `LOCK.INFO`, keyspace events, `LOCK.GUARD`). This file holds the helpers they share:
//! grants, refreshes and releases, a client blocked in `LOCK.ACQUIRE`, `LOCK.INFO`
//! checks and the `lock.*` events a subscriber sees.

mod configs;
mod effects;
mod leases;
mod modes;
mod queue;
mod readers_writers;
mod replies;
mod semaphores;

use std::time::Duration;

use testkit::resp::{RawClient, Reply};
use testkit::*;

const BAD_LIMIT: &str = "ERR invalid limit";

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
    Nil,
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
            Want::Nil => *value == Reply::Bulk(None),
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
    // None of these tests' holders belongs to a session.
    fields.push(("in-session", Want::Int(0)));
    // Only an exclusive holder has a value ("" when it set none).
    let value = match mode {
        "exclusive" => Want::Text(""),
        _ => Want::Nil,
    };
    fields.push(("value", value));
    fields
}

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
