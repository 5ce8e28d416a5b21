//! `LOCK.ACQUIRE key ttl-ms [TOKEN token] [SESSION session] [BLOCK timeout-ms] [SHARED]
//! [LIMIT n] [LOCKDELAY ms]` → `[token, fence]` or nil. Exclusive by default; `SHARED`
//! for a read-write lock's reader, `LIMIT n` for one of a semaphore's n permits;
//! `SESSION` makes the holding one of the session's; `LOCKDELAY` keeps the key taken by
//! nobody that long after the lease runs out.

use fencelock_core::args::{
    parse_lock_delay, parse_mode, parse_options_and_flags, parse_session, parse_timeout, parse_ttl,
    parse_value,
};
use std::borrow::Cow;

use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use fencelock_core::holding::MAX_TOKEN_BYTES;
use fencelock_core::limits::Limits;
use fencelock_core::lock::{self, Acquire as Decision, AcquireRequest};
use fencelock_core::mode::Mode;
use fencelock_core::token::Generated;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::{to_redis, to_redis_on};
use crate::blocking::{self, Wanted};
use crate::config;
use crate::fault;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, ACCESS, RW, UPDATE};
use crate::ffi::lock_key::LockKey;
use crate::ffi::reply;
use crate::ffi::server;
use crate::ffi::server_clock;
use crate::keyspace::effects::{self, NewHolder};
use crate::node_fence;

const NAME: &str = "lock.acquire";

pub struct Acquire;

impl Command for Acquire {
    const NAME: &'static str = NAME;

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let limits = config::limits();
        let request = parse(args, &limits).map_err(to_redis)?;
        fault::inject("command", request.asked.token.as_deref());
        blocking::counting_wait(request.asked.block_ms.is_some(), || {
            acquire(ctx, &request, &limits)
        })
        // The key's name only for an error (reading it asks Redis).
        .map_err(|error| to_redis_on(request.key.as_slice())(error))
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
/// Not `deny-oom`: under `maxmemory` it refuses only what needs new memory itself
/// (`server::out_of_memory`), so a holder keeps its lock.
pub const SPEC: CommandSpec = CommandSpec {
    name: Acquire::NAME,
    entry: Some(entry::<Acquire>),
    flags: c"write blocking",
    categories: "write blocking",
    replication_form: false,
    summary:
        "Acquires a lock for ttl-ms, optionally waiting in FIFO order; returns [token, fence].",
    since: c"0.1.0",
    complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
    arity: -3,
    keys: Keys::One(RW.with(ACCESS).with(UPDATE)),
};

struct Request<'a> {
    key: &'a RedisString,
    asked: Wanted<'a>,
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
) -> Result<Wanted<'a>, CommandError> {
    // The plain `LOCK.ACQUIRE key ttl`, the most frequent, has no options to look at.
    let ([token, block, limit, session, lock_delay, value], [shared]) = if options.is_empty() {
        ([None; 6], [false])
    } else {
        let options: Vec<&[u8]> = options.iter().map(RedisString::as_slice).collect();
        parse_options_and_flags(
            &options,
            ["TOKEN", "BLOCK", "LIMIT", "SESSION", "LOCKDELAY", "VALUE"],
            ["SHARED"],
        )?
    };
    let ttl_ms = parse_ttl(ttl.as_slice(), command, limits.max_ttl_ms)?;
    let token = token
        .map(|token| parse_compared_token(token, limits.max_token_length))
        .transpose()?
        .map(|token| Cow::Borrowed(token.bytes));
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
    Ok(Wanted {
        ttl_ms,
        token,
        block_ms,
        mode,
        session: session.map(Cow::Borrowed),
        lock_delay_ms,
        value: value.map(Cow::Borrowed),
        all_keys: false,
        once: None,
    })
}

/// The token an acquire holds with (the chosen one, else the generated one), after the
/// checks a key makes of it: a token or session over the length limit may only renew
/// the holding it already has.
pub(super) fn checked_token<'t>(
    asked: &'t Wanted,
    generated: Option<&'t Generated>,
    key: &LockKey,
    now_ms: i64,
    limits: &Limits,
) -> Result<&'t [u8], CommandError> {
    let token: &[u8] = match (asked.token.as_deref(), generated) {
        (Some(token), _) => {
            let compared = parse_compared_token(token, limits.max_token_length)?;
            if compared.over_limit() {
                compared.holds(key.lock(), now_ms)?;
            }
            token
        }
        (None, generated) => generated.map_or(&[], Generated::hex),
    };
    if let Some(session) = asked
        .session
        .as_deref()
        .filter(|s| s.len() > limits.max_token_length)
    {
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
    asked: &Wanted,
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
        // Asked first: the name is read (a call into Redis) only if anyone waits.
        queued_before: blocking::anyone_waiting() && blocking::is_queued(ctx, name.as_slice()),
        fresh_token: asked.token.is_none(),
        session: asked.session.as_deref(),
    };
    let extras = asked.extras();
    let current = key.lock()?;
    let now_us = server_clock::now_micros();
    let decision = node_fence::with_clock(|fences| {
        lock::acquire(current, &request_of, fences, now_us, now_ms)
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
                now_us,
            };
            let change = effects::grant(ctx, &mut key, &new)?;
            blocking::after(ctx, &mut key, change);
            reply::grant(ctx, token, fence);
            Ok(RedisValue::NoReply)
        }
        Decision::Renewed { fence } => {
            // A retry that names another value sets it, as `LOCK.PROCLAIM` would, and
            // like it is refused when memory is full (a plain renewal never is).
            let new_value = asked.value.as_deref().filter(|value| {
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
            blocking::wait(ctx, &[(name, next_change)], asked, limits.max_waiters)
        }
        Decision::WrongMode(held) => Err(CommandError::WrongMode(held)),
        Decision::WrongSession => Err(CommandError::WrongSession),
        Decision::FencesExhausted => Err(CommandError::FencesExhausted),
    }
}
