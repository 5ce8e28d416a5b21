//! Helpers for the lock commands through the `redis` crate, and for waiting on a
//! condition without sleeping longer than needed.

use std::time::{Duration, Instant};

use redis::{cmd, Connection, Value};

use crate::resp::{RawClient, Reply};
use crate::server::Server;

/// `LOCK.ACQUIRE key ttl [extra…]` → `Some((token, fence))` or `None` when busy.
pub fn acquire(con: &mut Connection, key: &str, ttl: i64, extra: &[&str]) -> Option<(String, i64)> {
    cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(ttl)
        .arg(extra)
        .query(con)
        .expect("LOCK.ACQUIRE")
}

/// A grant that must happen: `LOCK.ACQUIRE key ttl [extra…]`, panicking when busy.
pub fn hold(con: &mut Connection, key: &str, ttl: i64, extra: &[&str]) -> (String, i64) {
    acquire(con, key, ttl, extra).unwrap_or_else(|| panic!("{key} {extra:?}: not granted"))
}

/// A grant that must happen for `session` (60 s lease, `extra` after `SESSION s`):
/// its token.
pub fn hold_in_session(con: &mut Connection, key: &str, session: &str, extra: &[&str]) -> String {
    let mut argv = vec!["SESSION", session];
    argv.extend_from_slice(extra);
    acquire(con, key, 60_000, &argv)
        .unwrap_or_else(|| panic!("{key} for {session}: not granted"))
        .0
}

/// The `[token, fence]` of a `LOCK.ACQUIRE` reply off the wire, or `None` for nil;
/// panics on anything else.
pub fn grant_of(reply: &Reply) -> Option<(String, i64)> {
    if reply.is_nil() {
        return None;
    }
    let (token, fence) = reply
        .grant()
        .unwrap_or_else(|| panic!("not a grant: {reply:?}"));
    Some((
        String::from_utf8(token.to_vec()).expect("a UTF-8 token"),
        fence,
    ))
}

/// The `[token, [fences]]` of a granted `LOCK.ACQUIREALL` off the wire; `None` for
/// anything else.
pub fn grant_all_of(reply: &Reply) -> Option<(String, Vec<i64>)> {
    let Reply::Array(Some(items)) = reply else {
        return None;
    };
    let [Reply::Bulk(Some(token)), Reply::Array(Some(fences))] = items.as_slice() else {
        return None;
    };
    let fences = fences
        .iter()
        .map(Reply::integer)
        .collect::<Option<Vec<_>>>()?;
    Some((String::from_utf8(token.clone()).ok()?, fences))
}

/// `PEXPIRETIME key`: the key's expiry in Unix ms (-1 none, -2 no key).
pub fn expire_time(con: &mut Connection, key: &str) -> i64 {
    int(con, &["PEXPIRETIME", key])
}

/// `LOCK.FENCE key` → the fence or `None`.
pub fn fence(con: &mut Connection, key: &str) -> Option<i64> {
    cmd("LOCK.FENCE").arg(key).query(con).expect("LOCK.FENCE")
}

/// An integer-reply command (`LOCK.RELEASE`, `LOCK.REFRESH`, `PTTL`, …).
pub fn int(con: &mut Connection, args: &[&str]) -> i64 {
    let (name, rest) = args.split_first().expect("a command");
    cmd(name).arg(rest).query(con).expect("integer reply")
}

/// Waits until `check` holds or panics after `timeout`.
pub fn eventually(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A primary and a replica already in sync with it.
pub fn primary_and_replica() -> (Server, Server) {
    let primary = Server::start();
    let replica = Server::start();
    replica.replicate_from(&primary);
    (primary, replica)
}

/// A replica has everything the primary propagated so far, whoever wrote it (gives
/// up after 10 s).
pub fn wait_replicated(primary: &mut Connection) {
    assert!(
        replicated_within(primary, Duration::from_secs(10)),
        "no replica acknowledged the primary's replication offset"
    );
}

/// Whether, within `timeout`, a replica acknowledged everything the primary had
/// propagated when this was called. `WAIT` alone counts only what this connection's
/// own commands propagated: on a connection that wrote nothing it returns at once, and
/// it misses what the primary propagated outside them (another client's writes, an
/// expiry, an eviction, which runs before a client's next command, a read included).
/// So the primary's offset is read first and a replica's acknowledged offset must
/// reach it; the `WAIT` before makes the replicas acknowledge at once when this
/// connection wrote last (else they do on their own, once a second).
pub fn replicated_within(primary: &mut Connection, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let target = replication_offsets(primary).0;
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let acked: i64 = cmd("WAIT").arg(1).arg(ms).query(primary).expect("WAIT");
    if acked < 1 {
        return false;
    }
    loop {
        if replication_offsets(primary)
            .1
            .iter()
            .any(|&acked| acked >= target)
        {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `INFO replication` of a primary: its `master_repl_offset` and the offset each
/// online replica acknowledged (`slaveN:…,state=online,offset=N,…`).
fn replication_offsets(primary: &mut Connection) -> (i64, Vec<i64>) {
    let info: String = cmd("INFO").arg("replication").query(primary).expect("INFO");
    let field = |line: &str, name: &str| {
        line.split(',')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let mut own = 0;
    let mut acked = Vec::new();
    for line in info.lines().map(str::trim) {
        if let Some(offset) = line.strip_prefix("master_repl_offset:") {
            own = offset.parse().expect("master_repl_offset");
        } else if line.starts_with("slave") && line.contains(":ip=") {
            let fields = line.split_once(':').map_or("", |(_, fields)| fields);
            if field(fields, "state").as_deref() == Some("online") {
                if let Some(offset) = field(fields, "offset").and_then(|o| o.parse().ok()) {
                    acked.push(offset);
                }
            }
        }
    }
    (own, acked)
}

/// `DUMP key`: its value, serialized.
pub fn dump(con: &mut Connection, key: &str) -> Vec<u8> {
    cmd("DUMP").arg(key).query(con).unwrap()
}

/// `RESTORE key 0 payload`: a key made from a `DUMP`, with no expiry, not replacing.
pub fn restore(con: &mut Connection, key: &str, payload: &[u8]) {
    let _: () = cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(payload)
        .query(con)
        .unwrap();
}

/// `DEBUG DIGEST` of the whole dataset.
pub fn digest(con: &mut Connection) -> String {
    cmd("DEBUG").arg("DIGEST").query(con).unwrap()
}

/// `LOCK.INFO key` as field → value, or `None` when the reply is nil.
pub fn lock_info(
    con: &mut Connection,
    key: &str,
) -> Option<std::collections::HashMap<String, Value>> {
    let info: Option<Vec<Value>> = cmd("LOCK.INFO").arg(key).query(con).unwrap();
    info.map(|flat| {
        flat.chunks(2)
            .map(|pair| {
                (
                    redis::from_redis_value::<String>(pair[0].clone()).unwrap(),
                    pair[1].clone(),
                )
            })
            .collect()
    })
}

/// `waiters` of `LOCK.INFO key` (0 when the reply is nil).
pub fn waiters(con: &mut Connection, key: &str) -> i64 {
    lock_info(con, key).map_or(0, |info| {
        redis::from_redis_value(info["waiters"].clone()).unwrap()
    })
}

/// Waits until `n` clients wait for `key`.
pub fn wait_for_waiters(con: &mut Connection, key: &str, n: i64) {
    eventually(
        Duration::from_secs(10),
        &format!("{n} waiters on {key}"),
        || waiters(con, key) == n,
    );
}

/// The local wall clock in Unix ms (the server runs on the same machine).
pub fn now_ms() -> i64 {
    let elapsed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(elapsed.as_millis()).expect("ms fit in i64")
}

/// When the server issued `fence`, in Unix ms on the server's own clock: a fence is the
/// larger of the last fence + 1 and the server's clock in µs, so on a server that has
/// not issued thousands of fences within a millisecond it is that clock. A test that
/// asks when a grant happened reads it here, not on its own clock after reading the
/// reply: a busy machine delays the test's threads, not the server's record.
pub fn fence_ms(fence: i64) -> i64 {
    fence / 1_000
}

/// Turns Redis's active expiry off (`DEBUG SET-ACTIVE-EXPIRE 0`): a key past its
/// expiry then goes only when a command touches it or fencelock's own timer acts. A
/// test that sees a waiter served at a lease's end with it off knows the module's
/// timer served it; a bound of some ms told that from Redis's expiry cycle (every
/// 100 ms) only on an idle machine.
pub fn without_active_expiry(con: &mut Connection) {
    let _: () = cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(con)
        .expect("DEBUG SET-ACTIVE-EXPIRE");
}

/// Turns keyspace notifications on (with module events, `KEd`) and returns a raw client
/// subscribed with `subscribe` (e.g. `["PSUBSCRIBE", "__keyspace@0__:lock:*"]`).
pub fn keyspace_subscriber(server: &Server, con: &mut Connection, subscribe: &[&str]) -> RawClient {
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEd")
        .query(con)
        .unwrap();
    let mut subscriber = RawClient::connect(server.port);
    subscriber.call_str(subscribe);
    subscriber
}

/// `CONFIG SET name value`.
pub fn config_set(con: &mut Connection, name: &str, value: &str) -> redis::RedisResult<()> {
    cmd("CONFIG").arg("SET").arg(name).arg(value).query(con)
}

/// `CONFIG GET name`'s value.
pub fn config_get(con: &mut Connection, name: &str) -> String {
    let pair: Vec<String> = cmd("CONFIG").arg("GET").arg(name).query(con).unwrap();
    assert_eq!(pair.len(), 2, "CONFIG GET {name}: {pair:?}");
    pair[1].clone()
}

/// `LOCK.FENCE key token`: the fence `token` holds `key` under, if it holds it.
pub fn fence_of(con: &mut Connection, key: &str, token: &str) -> Option<i64> {
    cmd("LOCK.FENCE").arg(key).arg(token).query(con).unwrap()
}

/// One entry of `LOCK.HELD session`: `[key, mode, fence, pttl]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub key: String,
    /// `exclusive`, `shared` or `semaphore`.
    pub mode: String,
    pub fence: i64,
    /// Milliseconds left of the lease, -1 when the key has no expiry.
    pub pttl: i64,
}

/// `LOCK.HELD session`, every entry checked to be `[bulk key, simple-string mode,
/// integer fence, integer pttl]`.
pub fn held(con: &mut Connection, session: &str) -> Vec<Holding> {
    let reply: Value = cmd("LOCK.HELD").arg(session).query(con).expect("LOCK.HELD");
    let Value::Array(entries) = reply else {
        panic!("LOCK.HELD {session}: not an array: {reply:?}")
    };
    entries
        .into_iter()
        .map(|entry| match entry {
            Value::Array(fields) => match fields.as_slice() {
                [Value::BulkString(key), Value::SimpleString(mode), Value::Int(fence), Value::Int(pttl)] => {
                    Holding {
                        key: String::from_utf8(key.clone()).expect("UTF-8 key"),
                        mode: mode.clone(),
                        fence: *fence,
                        pttl: *pttl,
                    }
                }
                _ => panic!("LOCK.HELD {session}: entry {fields:?}"),
            },
            other => panic!("LOCK.HELD {session}: entry {other:?}"),
        })
        .collect()
}

/// `LOCK.KEEPALIVE session ttl` → how many holdings of `session` it kept.
pub fn keepalive(con: &mut Connection, session: &str, ttl: i64) -> i64 {
    cmd("LOCK.KEEPALIVE")
        .arg(session)
        .arg(ttl)
        .query(con)
        .expect("LOCK.KEEPALIVE")
}

/// `LOCK.ONCE key ttl KEEP keep extra…`'s raw reply.
pub fn once_claim(con: &mut Connection, key: &str, ttl: i64, keep: i64, extra: &[&str]) -> Value {
    cmd("LOCK.ONCE")
        .arg(key)
        .arg(ttl)
        .arg("KEEP")
        .arg(keep)
        .arg(extra)
        .query(con)
        .unwrap()
}
