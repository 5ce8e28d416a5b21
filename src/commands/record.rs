//! `LOCK.RECORD key RUNNING token fence KEEP keep-ms [PXAT unix-ms] [FINGERPRINT fp]
//! [SESSION session] [VALUE value]` and `LOCK.RECORD key DONE fence result KEEP keep-ms [PXAT
//! unix-ms] [FINGERPRINT fp]` → OK. The effect form of run once: what the primary
//! writes to replicas and the AOF (and what an AOF rewrite emits) for a run granted or
//! a result stored, every value spelled out so that replay is exact. It replaces the
//! key's lock value (other types are WRONGTYPE) and raises this node's fence clock past
//! `fence`. Applications do not need to call it.

use fencelock_core::args::{parse_integer, parse_options_and_flags, parse_session, parse_value};
use fencelock_core::error::CommandError;
use fencelock_core::holding::{Extras, Holding, MAX_TOKEN_BYTES, MAX_VALUE_BYTES};
use fencelock_core::once::{parse_keep, OnceRecord};
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, OW, UPDATE};
use crate::ffi::lock_key::LockKey;
use crate::ffi::replicate;
use crate::keyspace::effects::Change;
use crate::keyspace::once;
use crate::node_fence;
use fencelock_core::mode::Mode;

pub struct Record;

impl Command for Record {
    const NAME: &'static str = "lock.record";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        record(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Record::NAME,
    entry: Some(entry::<Record>),
    flags: c"write deny-oom fast",
    categories: "write fast",
    replication_form: true,
    summary: "Writes an explicit run-once record (the replicated form of a run granted or a result stored).",
    since: c"0.4.0",
    complexity: c"O(1) (plus the length of the result)",
    arity: -7,
    keys: Keys::One(OW.with(UPDATE)),
};

fn record(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, state, first, second, options @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let options: Vec<&[u8]> = options.iter().map(RedisString::as_slice).collect();
    let ([keep, deadline, fingerprint, session, value], []) = parse_options_and_flags(
        &options,
        ["KEEP", "PXAT", "FINGERPRINT", "SESSION", "VALUE"],
        [],
    )?;
    // Any keep a primary's claim could have had, whatever this node's `max-ttl`.
    let keep_ms = parse_keep(keep.ok_or(CommandError::Syntax)?, "lock.record", i64::MAX)?;
    let deadline = deadline.map(parse_integer).transpose()?;
    if deadline.is_some_and(|d| d <= 0) {
        return Err(CommandError::InvalidExpire("lock.record"));
    }
    // Any fingerprint and session the primary could have allowed.
    if fingerprint.is_some_and(|fp| fp.is_empty() || fp.len() > MAX_TOKEN_BYTES) {
        return Err(CommandError::InvalidFingerprint);
    }
    let record = match state.as_slice().to_ascii_uppercase().as_slice() {
        b"RUNNING" => {
            let token = first.as_slice();
            if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
                return Err(CommandError::InvalidToken);
            }
            let extras = Extras {
                session: session
                    .map(|session| parse_session(session, MAX_TOKEN_BYTES))
                    .transpose()?,
                lock_delay_ms: 0,
                value: value
                    .map(|value| parse_value(value, MAX_VALUE_BYTES))
                    .transpose()?
                    .filter(|value| !value.is_empty()),
            };
            let fence = parse_fence(second)?;
            let holding =
                Holding::pack_with(token, fence, extras).ok_or(CommandError::InvalidToken)?;
            OnceRecord::running(holding, keep_ms, fingerprint)
        }
        b"DONE" if session.is_none() && value.is_none() => {
            let fence = parse_fence(first)?;
            OnceRecord::done(fence, keep_ms, fingerprint, second.as_slice())
                .ok_or(CommandError::InvalidFence)?
        }
        _ => return Err(CommandError::Syntax),
    };
    node_fence::observe(record.fence());
    let mut key = LockKey::open(ctx, name, true);
    // Only a free name or a lock key may be overwritten; other types are WRONGTYPE.
    key.lock()?;
    once::apply_record(ctx, &mut key, record, deadline)?;
    blocking::after(ctx, &mut key, Change::Applied(Mode::Exclusive));
    // Deterministic: it carries every value, so it is propagated as it came.
    replicate::verbatim(ctx);
    Ok(RedisValue::SimpleStringStatic("OK"))
}

fn parse_fence(fence: &RedisString) -> Result<u64, CommandError> {
    let fence = parse_integer(fence.as_slice())?;
    u64::try_from(fence)
        .ok()
        .filter(|&f| f > 0)
        .ok_or(CommandError::InvalidFence)
}
