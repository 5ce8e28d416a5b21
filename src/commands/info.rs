//! `LOCK.INFO key` → `held`, `fence`, `ttl-ms`, `waiters`, `mode`, `holders`, `limit`
//! (semaphores only), `waiters-exclusive`, `waiters-shared`, `in-session`, `value` as
//! field/value pairs; nil when the lock is free and nobody waits. `fence` is the highest
//! live one, `ttl-ms` the key's (the latest lease), `in-session` how many live holders
//! belong to a session, `value` the exclusive holder's public value (nil when no holding
//! is exclusive). A lock whose leases ran out and that is kept for their
//! lock-delay shows `held` 0, `mode` `quarantined` and the time left as `ttl-ms`.
//! A run-once key (`LOCK.ONCE`) adds `state` (`running` or `done`), `keep-ms` (the keep
//! time a result will have, or, done, what is left of it) and `result-size`; a done one
//! shows `held` 0, `mode` `done` and the run's fence. Never shows a token, a session's
//! name or a result. Read-only.

use fencelock_core::error::CommandError;
use fencelock_core::mode::Mode;
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, ACCESS, RO};
use crate::ffi::lock_key::LockKey;
use crate::ffi::server_clock;

pub struct Info;

impl Command for Info {
    const NAME: &'static str = "lock.info";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        info(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Info::NAME,
    entry: Some(entry::<Info>),
    flags: c"readonly fast",
    categories: "read fast",
    replication_form: false,
    summary: "Returns whether a lock is held, its fence, remaining ttl and waiters.",
    since: c"0.1.0",
    complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
    arity: 2,
    keys: Keys::One(RO.with(ACCESS)),
};

fn field(name: &'static str, value: RedisValue) -> [RedisValue; 2] {
    [RedisValue::SimpleStringStatic(name), value]
}

fn integer(value: usize) -> RedisValue {
    RedisValue::Integer(i64::try_from(value).unwrap_or(i64::MAX))
}

/// Live holders that belong to a session.
fn in_session(lock: LockRef, now_ms: i64) -> usize {
    match lock {
        LockRef::Exclusive(holding) => usize::from(holding.has_session()),
        LockRef::Quarantined(_) => 0,
        LockRef::Shared(set) => set.in_session_count(now_ms),
    }
}

fn info(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name] = args else {
        return Err(CommandError::WrongArity);
    };
    let key = LockKey::open(ctx, name, false);
    let now_ms = server_clock::command_ms();
    let found = key.lock()?;
    // A lock past its leases, kept for their lock-delays: held by nobody.
    let quarantined = match found {
        Some(LockRef::Shared(set)) => set.live_count(now_ms) > 0 && set.holding_count(now_ms) == 0,
        found => found.is_some_and(LockRef::is_quarantined),
    };
    // Shared holders whose lease ended do not count, even before they are dropped.
    let lock = found.filter(|held| held.live_holders(now_ms) > 0);
    let (waiting_exclusive, waiting_shared) = blocking::waiter_counts(ctx, name.as_slice());
    let waiters = waiting_exclusive + waiting_shared;
    if lock.is_none() && !quarantined && waiters == 0 {
        return Ok(RedisValue::Null);
    }
    let once = key.once();
    let done = once.filter(|record| record.is_done());
    let fence = lock
        .and_then(|held| held.visible_fence(now_ms))
        .or(done.map(|record| record.fence()))
        .map_or(RedisValue::Null, |fence| {
            RedisValue::Integer(i64::try_from(fence).unwrap_or(i64::MAX))
        });
    // A holder's lease; a quarantine's time left.
    let left = if quarantined {
        key.remaining_ms()
    } else {
        key.lease_remaining_ms()
    };
    let ttl = match (lock.is_some() || quarantined, left) {
        (true, Some(ms)) => RedisValue::Integer(ms),
        (true, None) => RedisValue::Integer(-1),
        (false, _) => RedisValue::Null,
    };
    let mode = match lock {
        _ if done.is_some() => RedisValue::SimpleStringStatic("done"),
        _ if quarantined => RedisValue::SimpleStringStatic("quarantined"),
        Some(held) => RedisValue::SimpleStringStatic(held.mode().name()),
        None => RedisValue::Null,
    };
    let semaphore_limit = match lock.map(LockRef::mode) {
        Some(Mode::Semaphore(limit)) => Some(limit),
        _ => None,
    };
    let mut fields = vec![
        field("held", RedisValue::Integer(i64::from(lock.is_some()))),
        field("fence", fence),
        field("ttl-ms", ttl),
        field("waiters", integer(waiters)),
        field("mode", mode),
        field(
            "holders",
            integer(lock.map_or(0, |held| held.live_holders(now_ms))),
        ),
    ];
    if let Some(limit) = semaphore_limit {
        fields.push(field("limit", RedisValue::Integer(i64::from(limit))));
    }
    fields.push(field("waiters-exclusive", integer(waiting_exclusive)));
    fields.push(field("waiters-shared", integer(waiting_shared)));
    // Last: added with sessions, after every field clients already read by position.
    fields.push(field(
        "in-session",
        integer(lock.map_or(0, |held| in_session(held, now_ms))),
    ));
    // Then the exclusive holder's public value ("" when it set none), as observers see it.
    let value = match lock {
        Some(LockRef::Exclusive(holding)) => {
            RedisValue::StringBuffer(holding.value().unwrap_or_default().to_vec())
        }
        _ => RedisValue::Null,
    };
    fields.push(field("value", value));
    if let Some(record) = once {
        let (state, keep_left) = match done {
            Some(_) => ("done", key.remaining_ms().unwrap_or(-1)),
            None => (
                "running",
                i64::try_from(record.keep_ms()).unwrap_or(i64::MAX),
            ),
        };
        fields.push(field("state", RedisValue::SimpleStringStatic(state)));
        fields.push(field("keep-ms", RedisValue::Integer(keep_left)));
        let size = record.result().map_or(0, <[u8]>::len);
        fields.push(field("result-size", integer(size)));
    }
    Ok(RedisValue::Array(fields.into_iter().flatten().collect()))
}
