//! "Wait for this": the one call a command makes when what it asked for is not there
//! yet. It decides whether the caller waits at all (`BLOCK` asked, and a client that
//! may block here), refuses a full queue or a server out of memory, answers a wait
//! that would close a cycle `DEADLOCK`, and otherwise blocks the client; the command
//! replies with what it returns. The steps stay private to `blocking`.

use fencelock_core::error::CommandError;
use fencelock_core::observe::Known;
use redis_module::{Context, RedisString, RedisValue};

use super::deadlocks::{refuse, would_deadlock};
use super::{enqueue_all, queue_is_full, Wanted};
use crate::ffi::lock_key::LockKey;
use crate::ffi::server::{self, selected_db};
use crate::observing;
use crate::stats;

/// An acquire (`LOCK.ACQUIRE`, `LOCK.ACQUIREALL`, `LOCK.ONCE`) found `keys` busy (each
/// with when its lock next changes by itself, a lease's end, if ever): it waits in
/// every key's queue as one wait if `wanted` asked to `BLOCK` and may block here,
/// else it is answered nil. `NoReply`: the client is blocked (or was answered
/// `DEADLOCK`), its reply comes later.
pub fn wait(
    ctx: &Context,
    keys: &[(&RedisString, Option<i64>)],
    wanted: &Wanted,
    max_waiters: usize,
) -> Result<RedisValue, CommandError> {
    let Some(timeout_ms) = wanted.block_ms.filter(|_| server::can_block(ctx)) else {
        stats::CONTENDED.bump();
        return Ok(RedisValue::Null);
    };
    let names: Vec<&[u8]> = keys.iter().map(|(name, _)| name.as_slice()).collect();
    if names
        .iter()
        .any(|name| queue_is_full(ctx, name, max_waiters))
    {
        return Err(CommandError::TooManyWaiters);
    }
    if server::out_of_memory(ctx) {
        return Err(CommandError::OutOfMemory);
    }
    if let Some(cycle) = would_deadlock(ctx, &names, wanted) {
        refuse(ctx, &cycle);
        return Ok(RedisValue::NoReply);
    }
    let keys = keys
        .iter()
        .map(|(name, next_change)| (name.as_slice().to_vec(), *next_change))
        .collect();
    if enqueue_all(ctx, keys, wanted.clone().into_owned(), timeout_ms) {
        Ok(RedisValue::NoReply)
    } else {
        stats::CONTENDED.bump();
        Ok(RedisValue::Null)
    }
}

/// `LOCK.OBSERVE` found the lock open as `key` still as the caller knows it: it waits
/// for a change if it asked to `BLOCK` (`block_ms`) and may block here, else it is
/// answered nil. An observer counts against the key's queue like a waiter.
pub fn wait_for_change(
    ctx: &Context,
    key: &LockKey,
    known: Known,
    block_ms: Option<i64>,
    max_waiters: usize,
) -> Result<RedisValue, CommandError> {
    let Some(timeout_ms) = block_ms.filter(|_| server::can_block(ctx)) else {
        return Ok(RedisValue::Null);
    };
    if queue_is_full(ctx, key.name().as_slice(), max_waiters) {
        return Err(CommandError::TooManyWaiters);
    }
    if server::out_of_memory(ctx) {
        return Err(CommandError::OutOfMemory);
    }
    if observing::wait(ctx, selected_db(ctx), key, known, timeout_ms) {
        Ok(RedisValue::NoReply)
    } else {
        Ok(RedisValue::Null)
    }
}
