//! `LOCK.DROP key token` → 1 if `token` was a holder (removed whatever its lease; the key
//! goes with its last holder), else 0. The effect form of a shared holder's release or
//! lease end: what the primary writes to replicas and the AOF, so they remove exactly
//! the holder the primary removed. Applications do not need to call it.

use fencelock_core::args::parse_token;
use fencelock_core::error::CommandError;
use fencelock_core::holding::MAX_TOKEN_BYTES;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, DELETE, RW};
use crate::ffi::lock_key::LockKey;
use crate::ffi::replicate;
use crate::keyspace::effects;

pub struct Drop;

impl Command for Drop {
    const NAME: &'static str = "lock.drop";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        drop_holder(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Drop::NAME,
    entry: Some(entry::<Drop>),
    flags: c"write fast",
    categories: "write fast",
    replication_form: true,
    summary: "Removes one holder whatever its lease (the replicated form of a shared release).",
    since: c"0.2.0",
    complexity: c"O(log n) in the holders of the shared lock",
    arity: 3,
    keys: Keys::One(RW.with(DELETE)),
};

fn drop_holder(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, token] = args else {
        return Err(CommandError::WrongArity);
    };
    // Any token a holding can carry, as for `LOCK.APPLY`.
    let token = parse_token(token.as_slice(), MAX_TOKEN_BYTES)?;
    let mut key = LockKey::open(ctx, name, true);
    let Some(change) = effects::remove_holder(ctx, &mut key, token)? else {
        return Ok(RedisValue::Integer(0));
    };
    // Waiters for this name (on a primary) may fit now.
    blocking::after(ctx, &mut key, change);
    // Deterministic: propagated as it came.
    replicate::verbatim(ctx);
    Ok(RedisValue::Integer(1))
}
