//! `LOCK.ACQUIRE key ttl-ms [TOKEN token] [BLOCK timeout-ms]` → `[token, fence]` or nil.

use std::borrow::Cow;

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::args::{parse_options, parse_timeout, parse_ttl};
use super::compared_token::{parse_compared_token, ComparedToken};
use super::errors::CommandError;
use super::{effects, reply};
use crate::blocking;
use crate::limits;
use crate::lock::{self, Acquire};
use crate::node_fence;
use crate::server_state;
use crate::stats;
use crate::store::{self, LockKey};
use crate::token;

const NAME: &str = "lock.acquire";

struct Request<'a> {
    key: &'a RedisString,
    ttl_ms: i64,
    token: Option<ComparedToken<'a>>,
    block_ms: Option<i64>,
}

fn parse(args: &[RedisString]) -> Result<Request<'_>, CommandError> {
    let [_, key, ttl, options @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let options: Vec<&[u8]> = options.iter().map(RedisString::as_slice).collect();
    let [token, block] = parse_options(&options, ["TOKEN", "BLOCK"])?;
    let ttl_ms = parse_ttl(ttl.as_slice(), NAME)?;
    let token = token.map(parse_compared_token).transpose()?;
    let block_ms = block.map(parse_timeout).transpose()?;
    Ok(Request {
        key,
        ttl_ms,
        token,
        block_ms,
    })
}

pub fn command(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let request = parse(args)?;
    acquire(ctx, &request).map_err(RedisError::from)
}

fn acquire(ctx: &Context, request: &Request) -> Result<RedisValue, CommandError> {
    let name = request.key;
    let key = LockKey::open(ctx, name, true);
    // Waiters come first: if the lock is free because its holder's deletion has not been
    // settled yet, the head of the queue takes it before this caller is considered.
    if key.holding()?.is_none() {
        blocking::hand_off(ctx, &key, name);
    }
    let token = match request.token {
        // A token over the length limit may only renew the holding it already has.
        Some(token) => {
            if token.over_limit() {
                token.holds(key.holding())?;
            }
            Cow::Borrowed(token.bytes)
        }
        None => Cow::Owned(token::generate()),
    };
    let now_ms = store::now_ms();
    let deadline = lock::lease_deadline(now_ms, request.ttl_ms, limits::max_ttl_ms())
        .ok_or(CommandError::InvalidExpire(NAME))?;
    let current = key.holding()?;
    let decision =
        node_fence::with_clock(|clock| lock::acquire(current, &token, clock, store::now_micros()));
    match decision {
        Acquire::Granted { fence } => {
            effects::grant(ctx, &key, name, &token, fence, deadline)?;
            reply::grant(ctx, &token, fence);
            Ok(RedisValue::NoReply)
        }
        Acquire::Renewed { fence } => {
            effects::extend(ctx, &key, name, deadline)?;
            blocking::lease_changed(ctx, name.as_slice(), deadline);
            reply::grant(ctx, &token, fence);
            Ok(RedisValue::NoReply)
        }
        Acquire::Busy => wait_or_give_up(ctx, &key, request),
        Acquire::FencesExhausted => Err(CommandError::FencesExhausted),
    }
}

/// Busy: queue the caller if it asked to BLOCK and may block here, else answer nil.
fn wait_or_give_up(
    ctx: &Context,
    key: &LockKey,
    request: &Request,
) -> Result<RedisValue, CommandError> {
    let Some(timeout_ms) = request.block_ms.filter(|_| server_state::can_block(ctx)) else {
        stats::CONTENDED.bump();
        return Ok(RedisValue::Null);
    };
    let name = request.key.as_slice();
    if blocking::queue_is_full(ctx, name, limits::max_waiters()) {
        return Err(CommandError::TooManyWaiters);
    }
    let remaining = key.remaining_ms();
    if blocking::enqueue(
        ctx,
        name,
        request.ttl_ms,
        request.token.map(|token| token.bytes.to_vec()),
        timeout_ms,
        remaining,
    ) {
        Ok(RedisValue::NoReply)
    } else {
        stats::CONTENDED.bump();
        Ok(RedisValue::Null)
    }
}
