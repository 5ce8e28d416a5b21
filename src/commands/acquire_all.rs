//! `LOCK.ACQUIREALL numkeys key [key ...] ttl-ms [TOKEN token] [SESSION session] [BLOCK
//! timeout-ms] [SHARED | LIMIT n] [LOCKDELAY ms]` → `[token, [fence1, …, fenceN]]` or
//! nil: every key or none, one token for all, each holding a fresh fence (or, for a key
//! the token already holds, its own, renewed). With `BLOCK` it waits in every key's
//! queue at once, and is granted when it stands first in all of them and all are free.

use std::collections::HashSet;

use fencelock_core::args::parse_integer;
use fencelock_core::error::{duplicate_key, CommandError};
use fencelock_core::limits::Limits;
use fencelock_core::lock::{self, AcquireRequest, Step};
use fencelock_core::token::Generated;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::acquire::{checked_token, lease_deadline, parse_asked, wait_or_give_up, Asked};
use super::support::error_replies::{to_redis, to_redis_on};
use crate::blocking;
use crate::config;
use crate::fault;
use crate::ffi::argv::Command;
use crate::ffi::getkeys;
use crate::ffi::lock_key::LockKey;
use crate::ffi::reply;
use crate::ffi::server;
use crate::ffi::server_clock;
use crate::keyspace::all_or_none::{self, Grant};
use crate::keyspace::effects;

const NAME: &str = "lock.acquireall";

pub struct AcquireAll;

impl Command for AcquireAll {
    const NAME: &'static str = NAME;

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        if getkeys::is_position_request(ctx) {
            declare_keys(ctx, args);
            return Ok(RedisValue::NoReply);
        }
        let limits = config::limits();
        let (keys, asked) = parse(args, &limits)?;
        fault::inject("command", asked.token.map(|token| token.bytes));
        blocking::counting_wait(asked.block_ms.is_some(), || {
            acquire_all(ctx, keys, &asked, &limits)
        })
    }
}

/// Tells Redis where the keys are (Redis 7.0's cluster routing and slot check read a
/// module command's keys this way, not from its key spec): numkeys of them after
/// `numkeys`. A call without room for them and a ttl declares none, and is refused
/// when it runs.
fn declare_keys(ctx: &Context, args: &[RedisString]) {
    let count = args
        .get(1)
        .and_then(|numkeys| parse_integer(numkeys.as_slice()).ok())
        .and_then(|numkeys| usize::try_from(numkeys).ok())
        .filter(|count| count.saturating_add(2) < args.len())
        .unwrap_or(0);
    for position in 2..2 + count {
        getkeys::declare(ctx, position, getkeys::UPDATE);
    }
}

/// The keys (distinct) and what is asked for them.
fn parse<'a>(
    args: &'a [RedisString],
    limits: &Limits,
) -> Result<(&'a [RedisString], Asked<'a>), RedisError> {
    let [_, numkeys, rest @ ..] = args else {
        return Err(to_redis(CommandError::WrongArity));
    };
    let numkeys = parse_integer(numkeys.as_slice()).map_err(to_redis)?;
    if numkeys < 1 {
        return Err(to_redis(CommandError::NumkeysTooFew));
    }
    let max_keys = config::max_keys();
    let count = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if count > max_keys {
        return Err(to_redis(CommandError::NumkeysTooMany(max_keys)));
    }
    let (Some(keys), Some([ttl, options @ ..])) = (rest.get(..count), rest.get(count..)) else {
        return Err(to_redis(CommandError::WrongArity));
    };
    let mut seen = HashSet::with_capacity(count);
    if let Some(twice) = keys.iter().find(|key| !seen.insert(key.as_slice())) {
        return Err(RedisError::String(duplicate_key(twice.as_slice())));
    }
    let asked = parse_asked(ttl, options, NAME, limits).map_err(to_redis)?;
    Ok((keys, asked))
}

fn acquire_all(
    ctx: &Context,
    names: &[RedisString],
    asked: &Asked,
    limits: &Limits,
) -> RedisResult {
    let now_ms = server_clock::command_ms();
    // Waiters come first, key by key, each key closed again before the next is looked
    // at: a handoff to a wait for several keys writes those keys through handles of
    // its own.
    for name in names {
        let mut key = LockKey::open(ctx, name, true);
        effects::drop_ended(ctx, &mut key, now_ms).map_err(to_redis)?;
        blocking::hand_off(ctx, &mut key);
    }
    let mut keys: Vec<LockKey> = names
        .iter()
        .map(|name| LockKey::open(ctx, name, true))
        .collect();
    let generated = asked.token.is_none().then(Generated::fresh);
    let mut token: &[u8] = &[];
    for key in &keys {
        token = checked_token(asked, generated.as_ref(), key, now_ms, limits)
            .map_err(to_redis_on(key.name().as_slice()))?;
    }
    let deadline = lease_deadline(asked, now_ms, limits, NAME).map_err(to_redis)?;
    let anyone_waiting = blocking::anyone_waiting();
    let mut steps = Vec::with_capacity(keys.len());
    for key in &keys {
        let name = key.name().as_slice();
        let request = AcquireRequest {
            token,
            mode: asked.mode,
            max_holders: limits.max_holders,
            queued_before: anyone_waiting && blocking::waiter_count(ctx, name) > 0,
            fresh_token: asked.token.is_none(),
            session: asked.session,
        };
        let current = key.lock().map_err(to_redis)?;
        steps.push(lock::step(current, &request, now_ms));
    }
    for (step, key) in steps.iter().zip(&keys) {
        let refusal = match step {
            Step::WrongMode(held) => CommandError::WrongMode(*held),
            Step::WrongSession => CommandError::WrongSession,
            _ => continue,
        };
        return Err(to_redis_on(key.name().as_slice())(refusal));
    }
    if steps.contains(&Step::Busy) {
        let waits: Vec<(&RedisString, Option<i64>)> = keys
            .iter()
            .map(|key| (key.name(), effects::next_lease_end(key, now_ms)))
            .collect();
        return wait_or_give_up(ctx, &waits, asked, limits, true).map_err(to_redis);
    }
    if steps.contains(&Step::Admit) && server::out_of_memory(ctx) {
        return Err(to_redis(CommandError::OutOfMemory));
    }
    let grant = Grant {
        token,
        generated: generated.as_ref(),
        mode: asked.mode,
        deadline_ms: deadline,
        extras: asked.extras(),
    };
    let plan = all_or_none::plan(&steps).map_err(to_redis)?;
    let mut made = Vec::with_capacity(plan.len());
    for (key, part) in keys.iter_mut().zip(plan) {
        match all_or_none::write(ctx, key, &grant, part) {
            Ok(part) => made.push(part),
            Err(error) => {
                for (key, part) in keys.iter_mut().zip(&made) {
                    all_or_none::give_back(ctx, key, part, token);
                }
                return Err(to_redis(error));
            }
        }
    }
    for (key, part) in keys.iter_mut().zip(&made) {
        blocking::after(ctx, key, part.change);
    }
    let fences: Vec<u64> = made.iter().map(|part| part.fence).collect();
    reply::grant_all(ctx, token, &fences);
    Ok(RedisValue::NoReply)
}
