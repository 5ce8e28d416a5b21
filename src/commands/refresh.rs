//! `LOCK.REFRESH key token ttl-ms` → 1 if `token` holds the lock (lease now ends
//! `ttl-ms` from now), else 0. An expired lease is gone and is never revived.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::args::{parse_token, parse_ttl};
use super::effects;
use super::errors::CommandError;
use crate::limits;
use crate::lock;
use crate::store::{self, LockKey};

const NAME: &str = "lock.refresh";

pub fn command(ctx: &Context, args: &[RedisString]) -> RedisResult {
    refresh(ctx, args).map_err(RedisError::from)
}

fn refresh(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, token, ttl] = args else {
        return Err(CommandError::WrongArity);
    };
    let ttl_ms = parse_ttl(ttl.as_slice(), NAME)?;
    let token = parse_token(token.as_slice())?;
    let key = LockKey::open(ctx, name, true);
    if !lock::is_holder(key.holding()?, token) {
        return Ok(RedisValue::Integer(0));
    }
    let deadline = lock::lease_deadline(store::now_ms(), ttl_ms, limits::max_ttl_ms())
        .ok_or(CommandError::InvalidExpire(NAME))?;
    effects::extend(ctx, &key, name, deadline)?;
    Ok(RedisValue::Integer(1))
}
