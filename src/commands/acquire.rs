//! `LOCK.ACQUIRE key ttl-ms [TOKEN token] [SESSION session] [BLOCK timeout-ms] [SHARED]
//! [LIMIT n] [LOCKDELAY ms]` → `[token, fence]` or nil. Exclusive by default; `SHARED`
//! for a read-write lock's reader, `LIMIT n` for one of a semaphore's n permits;
//! `SESSION` makes the holding one of the session's; `LOCKDELAY` keeps the key taken by
//! nobody that long after the lease runs out.

use fencelock_core::args::{
    parse_lock_delay, parse_mode, parse_options_and_flags, parse_session, parse_timeout, parse_ttl,
    parse_value,
};
use fencelock_core::compared_token::{parse_compared_token, ComparedToken};
use fencelock_core::error::CommandError;
use fencelock_core::holding::{Extras, MAX_TOKEN_BYTES};
use fencelock_core::limits::Limits;
use fencelock_core::lock::{self, Acquire as Decision, AcquireRequest};
use fencelock_core::mode::Mode;
use fencelock_core::token::Generated;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::{to_redis, to_redis_on};
use crate::blocking;
use crate::config;
use crate::fault;
use crate::ffi::argv::Command;
use crate::ffi::lock_key::LockKey;
use crate::ffi::reply;
use crate::ffi::server;
use crate::ffi::server_clock;
use crate::keyspace::effects::{self, NewHolder};
use crate::node_fence;
use crate::stats;

const NAME: &str = "lock.acquire";

pub struct Acquire;

impl Command for Acquire {
    const NAME: &'static str = NAME;

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let limits = config::limits();
        let request = parse(args, &limits).map_err(to_redis)?;
        fault::inject("command", request.asked.token.map(|token| token.bytes));
        blocking::counting_wait(request.asked.block_ms.is_some(), || {
            acquire(ctx, &request, &limits)
        })
        .map_err(to_redis_on(request.key.as_slice()))
    }
}

struct Request<'a> {
    key: &'a RedisString,
    asked: Asked<'a>,
}

/// What an acquire asks for besides its keys (`LOCK.ACQUIRE` and `LOCK.ACQUIREALL`).
pub(super) struct Asked<'a> {
    pub(super) ttl_ms: i64,
    pub(super) token: Option<ComparedToken<'a>>,
    pub(super) block_ms: Option<i64>,
    pub(super) mode: Mode,
    pub(super) session: Option<&'a [u8]>,
    pub(super) lock_delay_ms: u64,
    /// The holding's public value (`VALUE`; an empty one is none).
    pub(super) value: Option<&'a [u8]>,
}

impl<'a> Asked<'a> {
    /// What the holding is to carry besides its token and fence.
    pub(super) fn extras(&self) -> Extras<'a> {
        Extras {
            session: self.session,
            lock_delay_ms: self.lock_delay_ms,
            value: self.value,
        }
    }
}

fn parse<'a>(args: &'a [RedisString], limits: &Limits) -> Result<Request<'a>, CommandError> {
    let [_, key, ttl, options @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let asked = parse_asked(ttl, options, NAME, limits)?;
    Ok(Request { key, asked })
}

/// The ttl and options of an acquire named `command`.
pub(super) fn parse_asked<'a>(
    ttl: &'a RedisString,
    options: &'a [RedisString],
    command: &'static str,
    limits: &Limits,
) -> Result<Asked<'a>, CommandError> {
    let options: Vec<&[u8]> = options.iter().map(RedisString::as_slice).collect();
    let ([token, block, limit, session, lock_delay, value], [shared]) = parse_options_and_flags(
        &options,
        ["TOKEN", "BLOCK", "LIMIT", "SESSION", "LOCKDELAY", "VALUE"],
        ["SHARED"],
    )?;
    let ttl_ms = parse_ttl(ttl.as_slice(), command, limits.max_ttl_ms)?;
    let token = token
        .map(|token| parse_compared_token(token, limits.max_token_length))
        .transpose()?;
    let block_ms = block.map(parse_timeout).transpose()?;
    let mode = parse_mode(shared, limit, limits.max_holders)?;
    let value = value
        .map(|value| parse_value(value, config::max_value_length()))
        .transpose()?
        .filter(|value| !value.is_empty());
    if value.is_some() && mode != Mode::Exclusive {
        return Err(CommandError::ValueNotExclusive);
    }
    // Any session a holding can carry: one over the length limit (acquired under a
    // larger one) may only renew what it holds (checked in `acquire`).
    let session = session
        .map(|session| parse_session(session, MAX_TOKEN_BYTES))
        .transpose()?;
    let lock_delay_ms = match lock_delay {
        Some(delay) => parse_lock_delay(delay, command, limits.max_ttl_ms)?,
        None => config::default_lock_delay_ms(limits),
    };
    Ok(Asked {
        ttl_ms,
        token,
        block_ms,
        mode,
        session,
        lock_delay_ms,
        value,
    })
}

/// The token an acquire holds with (the chosen one, else the generated one), after the
/// checks a key makes of it: a token or session over the length limit may only renew
/// the holding it already has.
pub(super) fn checked_token<'t>(
    asked: &Asked<'t>,
    generated: Option<&'t Generated>,
    key: &LockKey,
    now_ms: i64,
    limits: &Limits,
) -> Result<&'t [u8], CommandError> {
    let token: &[u8] = match (asked.token, generated) {
        (Some(token), _) => {
            if token.over_limit() {
                token.holds(key.lock(), now_ms)?;
            }
            token.bytes
        }
        (None, generated) => generated.map_or(&[], Generated::hex),
    };
    if let Some(session) = asked.session.filter(|s| s.len() > limits.max_token_length) {
        let renews = key
            .lock()?
            .and_then(|held| held.holding_of(token, now_ms))
            .is_some_and(|holding| holding.in_session(Some(session)));
        if !renews {
            return Err(CommandError::InvalidSession);
        }
    }
    Ok(token)
}

/// The deadline of a lease `asked` starts now, which must leave room for its
/// lock-delay after it.
pub(super) fn lease_deadline(
    asked: &Asked,
    now_ms: i64,
    limits: &Limits,
    command: &'static str,
) -> Result<i64, CommandError> {
    lock::lease_deadline(now_ms, asked.ttl_ms, limits.max_ttl_ms)
        .filter(|deadline| {
            let delay = i64::try_from(asked.lock_delay_ms).unwrap_or(i64::MAX);
            deadline.checked_add(delay).is_some()
        })
        .ok_or(CommandError::InvalidExpire(command))
}

/// What the waiter of `asked` wants when it is granted (`all_keys`: asked by
/// `LOCK.ACQUIREALL`).
pub(super) fn wanted(asked: &Asked, all_keys: bool) -> blocking::Wanted {
    blocking::Wanted {
        all_keys,
        ttl_ms: asked.ttl_ms,
        token: asked.token.map(|token| token.bytes.to_vec()),
        mode: asked.mode,
        session: asked.session.map(<[u8]>::to_vec),
        lock_delay_ms: asked.lock_delay_ms,
        value: asked.value.map(<[u8]>::to_vec),
        once: None,
    }
}

fn acquire(ctx: &Context, request: &Request, limits: &Limits) -> Result<RedisValue, CommandError> {
    let name = request.key;
    let asked = &request.asked;
    let mut key = LockKey::open(ctx, name, true);
    let now_ms = server_clock::command_ms();
    effects::drop_ended(ctx, &mut key, now_ms)?;
    // Waiters come first: if the lock has room because a holder's leaving has not been
    // settled yet, the queue takes it before this caller is considered.
    blocking::hand_off(ctx, &mut key);
    let generated = asked.token.is_none().then(Generated::fresh);
    let token = checked_token(asked, generated.as_ref(), &key, now_ms, limits)?;
    let deadline = lease_deadline(asked, now_ms, limits, NAME)?;
    let request_of = AcquireRequest {
        token,
        mode: asked.mode,
        max_holders: limits.max_holders,
        queued_before: blocking::anyone_waiting()
            && blocking::waiter_count(ctx, name.as_slice()) > 0,
        fresh_token: asked.token.is_none(),
        session: asked.session,
    };
    let extras = asked.extras();
    let current = key.lock()?;
    let decision = node_fence::with_clock(|fences| {
        lock::acquire(
            current,
            &request_of,
            fences,
            server_clock::now_micros(),
            now_ms,
        )
    });
    match decision {
        Decision::Granted { .. } if server::out_of_memory(ctx) => Err(CommandError::OutOfMemory),
        Decision::Granted { fence } => {
            let new = NewHolder {
                token,
                fence,
                deadline_ms: deadline,
                mode: asked.mode,
                generated: generated.as_ref(),
                extras,
            };
            let change = effects::grant(ctx, &mut key, &new)?;
            blocking::after(ctx, &mut key, change);
            reply::grant(ctx, token, fence);
            Ok(RedisValue::NoReply)
        }
        Decision::Renewed { fence } => {
            // A retry that names another value sets it, as `LOCK.PROCLAIM` would, and
            // like it is refused when memory is full (a plain renewal never is).
            let new_value = asked.value.filter(|value| {
                current
                    .and_then(|held| held.holding_of(token, now_ms))
                    .is_some_and(|h| h.value() != Some(*value))
            });
            if new_value.is_some() && server::out_of_memory(ctx) {
                return Err(CommandError::OutOfMemory);
            }
            let change = effects::extend(ctx, &mut key, token, deadline)?;
            if let Some(value) = new_value {
                effects::proclaim(ctx, &mut key, value)?;
            }
            blocking::after(ctx, &mut key, change);
            reply::grant(ctx, token, fence);
            Ok(RedisValue::NoReply)
        }
        Decision::Busy => {
            let next_change = effects::next_lease_end(&key, server_clock::command_ms());
            wait_or_give_up(ctx, &[(name, next_change)], asked, limits, false)
        }
        Decision::WrongMode(held) => Err(CommandError::WrongMode(held)),
        Decision::WrongSession => Err(CommandError::WrongSession),
        Decision::FencesExhausted => Err(CommandError::FencesExhausted),
    }
}

/// Busy: queue the caller for `keys` (each with when its lock next changes by itself)
/// if it asked to BLOCK and may block here, else answer nil; a wait that would close a
/// cycle of waits is answered `DEADLOCK` instead.
pub(super) fn wait_or_give_up(
    ctx: &Context,
    keys: &[(&RedisString, Option<i64>)],
    asked: &Asked,
    limits: &Limits,
    all_keys: bool,
) -> Result<RedisValue, CommandError> {
    let Some(timeout_ms) = asked.block_ms.filter(|_| server::can_block(ctx)) else {
        stats::CONTENDED.bump();
        return Ok(RedisValue::Null);
    };
    let names: Vec<&[u8]> = keys.iter().map(|(name, _)| name.as_slice()).collect();
    if names
        .iter()
        .any(|name| blocking::queue_is_full(ctx, name, limits.max_waiters))
    {
        return Err(CommandError::TooManyWaiters);
    }
    if server::out_of_memory(ctx) {
        return Err(CommandError::OutOfMemory);
    }
    let wanted = wanted(asked, all_keys);
    if let Some(cycle) = blocking::would_deadlock(ctx, &names, &wanted) {
        blocking::refuse_deadlock(ctx, &cycle);
        return Ok(RedisValue::NoReply);
    }
    let keys = keys
        .iter()
        .map(|(name, next_change)| (name.as_slice().to_vec(), *next_change))
        .collect();
    if blocking::enqueue_all(ctx, keys, wanted, timeout_ms) {
        Ok(RedisValue::NoReply)
    } else {
        stats::CONTENDED.bump();
        Ok(RedisValue::Null)
    }
}
