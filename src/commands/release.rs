//! `LOCK.RELEASE key token` → 1 if `token` held the lock (the key is gone, or already
//! handed to the first waiter), else 0.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::compared_token::parse_compared_token;
use super::effects;
use super::errors::CommandError;
use crate::blocking;
use crate::store::LockKey;

pub fn command(ctx: &Context, args: &[RedisString]) -> RedisResult {
    release(ctx, args).map_err(RedisError::from)
}

fn release(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, token] = args else {
        return Err(CommandError::WrongArity);
    };
    let token = parse_compared_token(token.as_slice())?;
    let key = LockKey::open(ctx, name, true);
    if !token.holds(key.holding())? {
        return Ok(RedisValue::Integer(0));
    }
    effects::release(ctx, &key, name)?;
    blocking::hand_off(ctx, &key, name);
    Ok(RedisValue::Integer(1))
}
