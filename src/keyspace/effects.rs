//! Applying a decision to the keyspace: write the key, replicate the *effect* (explicit
//! token, fence and absolute deadline, never the clock-dependent command), announce it
//! as a keyspace event and count it. Every path that changes a lock goes through here,
//! so replicas and the AOF see exactly what the primary did. (While nothing reads the
//! replication stream at all, `propagation` lets the command stand for itself.)

use fencelock_core::error::CommandError;
use fencelock_core::holding::Holding;
use redis_module::{Context, RedisString};

use super::{events, propagation, unlinked};
use crate::rm::key::LockKey;
use crate::rm::mark_key::MarkKey;
use crate::rm::replicate;
use crate::stats;

/// Stores a new holding (`token` under `fence`) until `deadline_ms` and propagates it as
/// `LOCK.APPLY key token fence PXAT deadline`.
pub fn grant(
    ctx: &Context,
    key: &LockKey,
    name: &RedisString,
    token: &[u8],
    fence: u64,
    deadline_ms: i64,
) -> Result<(), CommandError> {
    let holding = Holding::pack(token, fence).ok_or(CommandError::InvalidToken)?;
    if !key.store(holding, deadline_ms) {
        return Err(CommandError::WriteFailed);
    }
    propagate(ctx, || {
        replicate::grant(ctx, name, token, fence, deadline_ms)
    });
    events::notify(ctx, events::ACQUIRED, name);
    stats::ACQUIRED.bump();
    Ok(())
}

/// Moves the lease's end to `deadline_ms`, propagated as `PEXPIREAT key deadline`.
pub fn extend(
    ctx: &Context,
    key: &LockKey,
    name: &RedisString,
    deadline_ms: i64,
) -> Result<(), CommandError> {
    if !key.set_deadline(deadline_ms) {
        return Err(CommandError::WriteFailed);
    }
    propagate(ctx, || replicate::deadline(ctx, name, deadline_ms));
    events::notify(ctx, events::REFRESHED, name);
    stats::REFRESHED.bump();
    Ok(())
}

/// Deletes the key (the lock is free), propagated as `DEL key`.
pub fn release(ctx: &Context, key: &LockKey, name: &RedisString) -> Result<(), CommandError> {
    if !key.delete() {
        return Err(CommandError::WriteFailed);
    }
    unlinked::forget();
    propagate(ctx, || replicate::delete(ctx, name));
    events::notify(ctx, events::RELEASED, name);
    stats::RELEASED.bump();
    Ok(())
}

/// Propagates `effect`, or the command itself while nothing reads the stream.
fn propagate(ctx: &Context, effect: impl FnOnce()) {
    if propagation::effects_needed(ctx) {
        effect();
    } else {
        replicate::verbatim(ctx);
    }
}

/// Raises the fence mark `name` to `fence`, propagated as `LOCK.MARK key fence` (always
/// as the effect: the command that raised it also propagates its inner command).
pub fn raise_mark(
    ctx: &Context,
    key: &MarkKey,
    name: &RedisString,
    fence: u64,
) -> Result<(), CommandError> {
    key.raise(fence)?;
    replicate::mark(ctx, name, fence);
    events::notify(ctx, events::MARK_RAISED, name);
    Ok(())
}
