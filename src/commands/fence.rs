//! `LOCK.FENCE key [token]` → with `token`, that holder's fence if it holds the lock (in
//! any mode); without, the exclusive holder's fence or the highest among shared holders;
//! else nil. Read-only, so it also answers on replicas.

use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::config;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, ACCESS, RO};
use crate::ffi::lock_key::LockKey;

pub struct Fence;

impl Command for Fence {
    const NAME: &'static str = "lock.fence";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        fence(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Fence::NAME,
    entry: Some(entry::<Fence>),
    flags: c"readonly fast",
    categories: "read fast",
    replication_form: false,
    summary: "Returns the fence of the current holding.",
    since: c"0.1.0",
    complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
    arity: -2,
    keys: Keys::One(RO.with(ACCESS)),
};

fn fence(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let (name, token) = match args {
        [_, name] => (name, None),
        [_, name, token] => {
            let max_len = config::limits().max_token_length;
            (name, Some(parse_compared_token(token.as_slice(), max_len)?))
        }
        _ => return Err(CommandError::WrongArity),
    };
    let key = LockKey::open(ctx, name, false);
    let now_ms = key.holders_clock_ms();
    let fence = match token {
        Some(token) if !token.holds(key.lock(), now_ms)? => None,
        Some(token) => key
            .lock()?
            .and_then(|held| held.fence_of(token.bytes, now_ms)),
        None => key.lock()?.and_then(|held| held.visible_fence(now_ms)),
    };
    Ok(fence.map_or(RedisValue::Null, |fence| {
        RedisValue::Integer(i64::try_from(fence).unwrap_or(i64::MAX))
    }))
}
