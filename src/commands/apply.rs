//! `LOCK.APPLY key token fence [PXAT unix-ms] [SHARED | LIMIT n] [SESSION session]
//! [LOCKDELAY ms] [VALUE value]` → OK. The effect form
//! of a grant: what the primary writes to replicas and the AOF (and what AOF rewrite
//! emits), with the token, fence and absolute deadline spelled out so replay is exact.
//! Exclusive, it replaces the key's value; with `SHARED` or `LIMIT n` (and `PXAT`, the
//! holder's own deadline) it adds that shared holder, or moves its deadline if the token
//! holds already, the key's expiry following the latest lease (a lock in another mode is
//! replaced). It also raises this node's fence clock past `fence`. Applications do not
//! need to call it.
//!
//! A deadline already in the past (AOF replayed after a long downtime, a replica whose
//! clock runs ahead) leaves the key already expired: it never comes back alive.

use fencelock_core::args::{
    parse_integer, parse_lock_delay, parse_mode, parse_options_and_flags, parse_session,
    parse_value,
};
use fencelock_core::error::CommandError;
use fencelock_core::holding::{Extras, Holding, MAX_TOKEN_BYTES, MAX_VALUE_BYTES};
use fencelock_core::mode::Mode;
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, OW, UPDATE};
use crate::ffi::lock_key::LockKey;
use crate::ffi::replicate;
use crate::keyspace::effects;
use crate::node_fence;

pub struct Apply;

impl Command for Apply {
    const NAME: &'static str = "lock.apply";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        apply(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Apply::NAME,
    entry: Some(entry::<Apply>),
    flags: c"write deny-oom fast",
    categories: "write fast",
    replication_form: true,
    summary: "Writes an explicit holding (the replicated form of a grant).",
    since: c"0.1.0",
    complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
    arity: -4,
    keys: Keys::One(OW.with(UPDATE)),
};

fn apply(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, token, fence, options @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let options: Vec<&[u8]> = options.iter().map(RedisString::as_slice).collect();
    let ([deadline, limit, session, lock_delay, value], [shared]) = parse_options_and_flags(
        &options,
        ["PXAT", "LIMIT", "SESSION", "LOCKDELAY", "VALUE"],
        ["SHARED"],
    )?;
    // Any session, lock-delay and value the primary could have allowed.
    let extras = Extras {
        session: session
            .map(|session| parse_session(session, MAX_TOKEN_BYTES))
            .transpose()?,
        lock_delay_ms: lock_delay
            .map(|delay| parse_lock_delay(delay, "lock.apply", i64::MAX))
            .transpose()?
            .unwrap_or(0),
        value: value
            .map(|value| parse_value(value, MAX_VALUE_BYTES))
            .transpose()?
            .filter(|value| !value.is_empty()),
    };
    // Any limit the primary could have allowed.
    let mode = parse_mode(shared, limit, usize::MAX)?;
    if extras.value.is_some() && mode != Mode::Exclusive {
        return Err(CommandError::ValueNotExclusive);
    }
    // Any token a holding can carry: a primary with a larger `max-token-length` than
    // this replica must still be followed.
    let token = token.as_slice();
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(CommandError::InvalidToken);
    }
    let fence = parse_integer(fence.as_slice())?;
    let fence = u64::try_from(fence)
        .ok()
        .filter(|&f| f > 0)
        .ok_or(CommandError::InvalidFence)?;
    let deadline = deadline.map(parse_integer).transpose()?;
    if deadline.is_some_and(|d| d <= 0) {
        return Err(CommandError::InvalidExpire("lock.apply"));
    }
    node_fence::observe(fence);
    let mut key = LockKey::open(ctx, name, true);
    // Only a free name or a lock key may be overwritten; other types are WRONGTYPE.
    key.lock()?;
    // A replayed effect that the key already holds writes, signals and propagates
    // nothing (a `WATCH` on the key survives it).
    let mut holding = Holding::pack_with(token, fence, extras).ok_or(CommandError::InvalidToken)?;
    // An exclusive holding with a lock-delay keeps its own lease end: `PXAT`.
    if let (Mode::Exclusive, Some(deadline)) = (mode, deadline) {
        holding.set_lease_end(deadline);
    }
    if holds_already(&key, &holding, deadline, mode) {
        return Ok(RedisValue::SimpleStringStatic("OK"));
    }
    let change = effects::apply(ctx, &mut key, holding, deadline, mode)?;
    blocking::after(ctx, &mut key, change);
    // Deterministic: it carries every value, so it is propagated as it came (a replica
    // with an AOF, or a user restoring a lock on a primary).
    replicate::verbatim(ctx);
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// Whether the key holds exactly this holding already: the same token with the same
/// fence, session and lock-delay, in the same mode, with the same deadline and the key's
/// expiry where it is.
fn holds_already(key: &LockKey, wanted: &Holding, deadline: Option<i64>, mode: Mode) -> bool {
    match (key.lock(), mode) {
        (Ok(Some(LockRef::Exclusive(holding))), Mode::Exclusive) => {
            holding == wanted && deadline.is_none_or(|deadline| key.deadline_ms() == Some(deadline))
        }
        (Ok(Some(LockRef::Shared(set))), _) if set.mode() == mode => {
            set.holder(&wanted.token()).is_some_and(|holder| {
                holder.holding() == wanted && Some(holder.deadline_ms()) == deadline
            }) && key.deadline_ms() == set.latest_deadline()
        }
        _ => false,
    }
}
