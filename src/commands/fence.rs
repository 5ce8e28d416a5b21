//! `LOCK.FENCE key [token]` → the fence of the current holding (with `token`: only if
//! that token holds it), else nil. Read-only, so it also answers on replicas.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::compared_token::parse_compared_token;
use super::errors::CommandError;
use crate::lock;
use crate::store::LockKey;

pub fn command(ctx: &Context, args: &[RedisString]) -> RedisResult {
    fence(ctx, args).map_err(RedisError::from)
}

fn fence(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let (name, token) = match args {
        [_, name] => (name, None),
        [_, name, token] => (name, Some(parse_compared_token(token.as_slice())?)),
        _ => return Err(CommandError::WrongArity),
    };
    let key = LockKey::open(ctx, name, false);
    let fence = match token {
        Some(token) if !token.holds(key.holding())? => None,
        _ => lock::visible_fence(key.holding()?, None),
    };
    Ok(fence.map_or(RedisValue::Null, |fence| {
        RedisValue::Integer(i64::try_from(fence).unwrap_or(i64::MAX))
    }))
}
