//! `LOCK.REFRESH key token ttl-ms [ADD]` → 1 if `token` holds the lock (in any mode),
//! else 0. Its lease now ends `ttl-ms` from now, or with `ADD` `ttl-ms` after its current
//! end (redis-py's `Lock.extend`, atomic). An expired lease is gone and is never revived.

use fencelock_core::args::parse_ttl;
use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use fencelock_core::lock::{self, LockRef};
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::config;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, RW, UPDATE};
use crate::ffi::lock_key::LockKey;
use crate::ffi::server_clock;
use crate::keyspace::effects;

const NAME: &str = "lock.refresh";

pub struct Refresh;

impl Command for Refresh {
    const NAME: &'static str = NAME;

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        refresh(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
/// Not `deny-oom`: under `maxmemory` it refuses only what needs new memory itself
/// (`server::out_of_memory`), so a holder keeps its lock.
pub const SPEC: CommandSpec = CommandSpec {
    name: Refresh::NAME,
    entry: Some(entry::<Refresh>),
    flags: c"write fast",
    categories: "write fast",
    replication_form: false,
    summary: "Extends the lease of a lock held by token (with ADD: by ttl-ms past its end).",
    since: c"0.1.0",
    complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
    arity: -4,
    keys: Keys::One(RW.with(UPDATE)),
};

fn refresh(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let (name, token, ttl, add) = match args {
        [_, name, token, ttl] => (name, token, ttl, false),
        [_, name, token, ttl, option] if option.as_slice().eq_ignore_ascii_case(b"ADD") => {
            (name, token, ttl, true)
        }
        [_, _, _, _, ..] => return Err(CommandError::Syntax),
        _ => return Err(CommandError::WrongArity),
    };
    let limits = config::limits();
    let ttl_ms = parse_ttl(ttl.as_slice(), NAME, limits.max_ttl_ms)?;
    let token = parse_compared_token(token.as_slice(), limits.max_token_length)?;
    let mut key = LockKey::open(ctx, name, true);
    let now_ms = server_clock::command_ms();
    effects::drop_ended(ctx, &mut key, now_ms)?;
    if !token.holds(key.lock(), now_ms)? {
        return Ok(RedisValue::Integer(0));
    }
    // Only `ADD` needs what is left (a key-expiry lookup otherwise spared).
    let remaining = add
        .then(|| remaining_lease(&key, token.bytes, now_ms))
        .flatten();
    // A lock made permanent (PERSIST) has no end to add to: it stays permanent.
    let Some(lease_ms) = lock::refreshed_lease(remaining, ttl_ms, add)? else {
        return Ok(RedisValue::Integer(1));
    };
    let deadline = lock::lease_deadline(now_ms, lease_ms, limits.max_ttl_ms)
        .ok_or(CommandError::InvalidExpire(NAME))?;
    let change = effects::extend(ctx, &mut key, token.bytes, deadline)?;
    blocking::after(ctx, &mut key, change);
    Ok(RedisValue::Integer(1))
}

/// What is left of holder `token`'s lease: the key's for an exclusive lock (`None`
/// once made permanent), the holder's own for a shared one.
fn remaining_lease(key: &LockKey, token: &[u8], now_ms: i64) -> Option<i64> {
    match key.lock() {
        Ok(Some(LockRef::Shared(set))) => set
            .holder(token)
            .map(|holder| holder.deadline_ms().saturating_sub(now_ms)),
        _ => key.lease_remaining_ms(),
    }
}
