//! `LOCK.REFRESH key token ttl-ms [ADD]` → 1 if `token` holds the lock, else 0. The lease
//! now ends `ttl-ms` from now, or with `ADD` `ttl-ms` after its current end (redis-py's
//! `Lock.extend`, atomic). An expired lease is gone and is never revived.

use fencelock_core::args::parse_ttl;
use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use fencelock_core::lock;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::errors::to_redis;
use crate::blocking;
use crate::config;
use crate::keyspace::effects;
use crate::rm::argv::Command;
use crate::rm::clock;
use crate::rm::key::LockKey;

const NAME: &str = "lock.refresh";

pub struct Refresh;

impl Command for Refresh {
    const NAME: &'static str = NAME;

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        refresh(ctx, args).map_err(to_redis)
    }
}

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
    let key = LockKey::open(ctx, name, true);
    if !token.holds(key.holding())? {
        return Ok(RedisValue::Integer(0));
    }
    let lease_ms = if add {
        // A lock made permanent (PERSIST) has no end to add to: it stays permanent.
        let Some(remaining) = key.remaining_ms() else {
            return Ok(RedisValue::Integer(1));
        };
        remaining
            .checked_add(ttl_ms)
            .ok_or(CommandError::InvalidExpire(NAME))?
    } else {
        ttl_ms
    };
    let deadline = lock::lease_deadline(clock::now_ms(), lease_ms, limits.max_ttl_ms)
        .ok_or(CommandError::InvalidExpire(NAME))?;
    effects::extend(ctx, &key, name, deadline)?;
    blocking::lease_changed(ctx, name.as_slice(), deadline);
    Ok(RedisValue::Integer(1))
}
