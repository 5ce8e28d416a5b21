//! `LOCK.RELEASE key token` → 1 if `token` held the lock (in any mode: the holder is
//! gone, and its room already handed to the queue), else 0.

use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::config;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, DELETE, RW};
use crate::ffi::lock_key::LockKey;
use crate::keyspace::effects;

pub struct Release;

impl Command for Release {
    const NAME: &'static str = "lock.release";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        release(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Release::NAME,
    entry: Some(entry::<Release>),
    flags: c"write fast",
    categories: "write fast",
    replication_form: false,
    summary: "Releases a lock held by token, handing it to the first waiter.",
    since: c"0.1.0",
    complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one, plus O(k log n) for k waiters granted",
    arity: 3,
    keys: Keys::One(RW.with(DELETE)),
};

fn release(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, token] = args else {
        return Err(CommandError::WrongArity);
    };
    let token = parse_compared_token(token.as_slice(), config::limits().max_token_length)?;
    let mut key = LockKey::open(ctx, name, true);
    let now_ms = key.holders_clock_ms();
    effects::drop_ended(ctx, &mut key, now_ms)?;
    if !token.holds(key.lock(), now_ms)? {
        return Ok(RedisValue::Integer(0));
    }
    let change = effects::release(ctx, &mut key, token.bytes)?;
    blocking::after(ctx, &mut key, change);
    Ok(RedisValue::Integer(1))
}
