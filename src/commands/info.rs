//! `LOCK.INFO key` → `held`, `fence`, `ttl-ms`, `waiters` as field/value pairs; nil when
//! the lock is free and nobody waits. Never shows the token. Read-only.

use fencelock_core::error::CommandError;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::errors::to_redis;
use crate::blocking;
use crate::rm::argv::Command;
use crate::rm::key::LockKey;

pub struct Info;

impl Command for Info {
    const NAME: &'static str = "lock.info";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        info(ctx, args).map_err(to_redis)
    }
}

fn field(name: &'static str, value: RedisValue) -> [RedisValue; 2] {
    [RedisValue::SimpleStringStatic(name), value]
}

fn info(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name] = args else {
        return Err(CommandError::WrongArity);
    };
    let key = LockKey::open(ctx, name, false);
    let holding = key.holding()?;
    let waiters = blocking::waiter_count(ctx, name.as_slice());
    if holding.is_none() && waiters == 0 {
        return Ok(RedisValue::Null);
    }
    let fence = holding.map_or(RedisValue::Null, |h| {
        RedisValue::Integer(i64::try_from(h.fence()).unwrap_or(i64::MAX))
    });
    let ttl = match (holding, key.remaining_ms()) {
        (Some(_), Some(ms)) => RedisValue::Integer(ms),
        (Some(_), None) => RedisValue::Integer(-1),
        (None, _) => RedisValue::Null,
    };
    let fields = [
        field("held", RedisValue::Integer(i64::from(holding.is_some()))),
        field("fence", fence),
        field("ttl-ms", ttl),
        field(
            "waiters",
            RedisValue::Integer(i64::try_from(waiters).unwrap_or(i64::MAX)),
        ),
    ];
    Ok(RedisValue::Array(fields.into_iter().flatten().collect()))
}
