//! Applying a decision to the keyspace: write the key, replicate the *effect* (explicit
//! token, fence and absolute deadline, never the clock-dependent command), announce it
//! as a keyspace event and count it. Every path that changes a lock goes through here,
//! so replicas and the AOF see exactly what the primary did. (While nothing reads the
//! replication stream at all, `propagation` lets the command stand for itself.)

use fencelock_core::error::CommandError;
use fencelock_core::holding::Holding;
use fencelock_core::mode::Mode;
use fencelock_core::shared::SharedHolders;
use fencelock_core::value::{LockRef, LockValue};
use redis_module::{Context, RedisString};

use super::{events, propagation, unlinked};
use crate::node_fence;
use crate::rm::key::LockKey;
use crate::rm::mark_key::MarkKey;
use crate::rm::node_state_form;
use crate::rm::replicate;
use crate::stats;

/// A grant about to be made.
#[derive(Clone, Copy)]
pub struct NewHolder<'a> {
    pub token: &'a [u8],
    pub fence: u64,
    pub deadline_ms: i64,
    pub mode: Mode,
    /// The token was generated for this grant, so it holds nothing here yet.
    pub fresh_token: bool,
}

/// Makes `token` a holder under `fence` until `deadline_ms`, in `mode`: the key's value
/// for an exclusive grant or the first shared holder, one more holder otherwise (the
/// caller decided it fits). Propagated as `LOCK.APPLY key token fence PXAT deadline`,
/// with `SHARED` or `LIMIT n` for a shared holder.
pub fn grant(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    new: &NewHolder,
) -> Result<(), CommandError> {
    let NewHolder {
        token,
        fence,
        deadline_ms,
        mode,
        fresh_token,
    } = *new;
    let holding = Holding::pack(token, fence).ok_or(CommandError::InvalidToken)?;
    let stored = if mode == Mode::Exclusive {
        key.store(LockValue::Exclusive(holding), deadline_ms)
    } else if let Some(set) = key.shared_mut() {
        if fresh_token {
            set.insert(holding, deadline_ms)?;
        } else {
            set.put(holding, deadline_ms)?;
        }
        let latest = set.latest_deadline().unwrap_or(deadline_ms);
        key.set_deadline(latest)
    } else {
        let mut set = SharedHolders::new(mode);
        set.insert(holding, deadline_ms)?;
        key.store(LockValue::Shared(set), deadline_ms)
    };
    if !stored {
        return Err(CommandError::WriteFailed);
    }
    propagate(ctx, || {
        replicate::grant(ctx, name, token, fence, deadline_ms, mode)
    });
    events::notify(ctx, events::ACQUIRED, name);
    stats::ACQUIRED.bump();
    Ok(())
}

/// Moves the lease of holder `token` to end at `deadline_ms`: the key's expiry for an
/// exclusive lock (propagated as `PEXPIREAT key deadline`), the holder's own for a shared
/// one (propagated as its `LOCK.APPLY`), the key's then following the latest lease.
pub fn extend(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
    deadline_ms: i64,
) -> Result<(), CommandError> {
    let Some(set) = key.shared_mut() else {
        if !key.set_deadline(deadline_ms) {
            return Err(CommandError::WriteFailed);
        }
        propagate(ctx, || replicate::deadline(ctx, name, deadline_ms));
        return announce_extended(ctx, name);
    };
    let fence = set
        .holder(token)
        .map(|holder| holder.holding().fence())
        .ok_or(CommandError::WriteFailed)?;
    set.set_deadline(token, deadline_ms);
    let (mode, latest) = (set.mode(), set.latest_deadline().unwrap_or(deadline_ms));
    if !key.set_deadline(latest) {
        return Err(CommandError::WriteFailed);
    }
    propagate(ctx, || {
        replicate::grant(ctx, name, token, fence, deadline_ms, mode)
    });
    announce_extended(ctx, name)
}

fn announce_extended(ctx: &Context, name: &RedisString) -> Result<(), CommandError> {
    events::notify(ctx, events::REFRESHED, name);
    stats::REFRESHED.bump();
    Ok(())
}

/// Holder `token` (which the caller found holding) leaves: an exclusive lock's key is
/// deleted (propagated as `DEL key`); a shared holder is removed (`LOCK.DROP key
/// token`), and the key with the last one.
pub fn release(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
) -> Result<(), CommandError> {
    if let Some(removed) = remove_shared(key, token) {
        if !removed? {
            return Err(CommandError::WriteFailed);
        }
        propagate(ctx, || replicate::drop_holder(ctx, name, token));
    } else {
        follow_latest_lease(key, None)?;
        propagate(ctx, || replicate::delete(ctx, name));
    }
    events::notify(ctx, events::RELEASED, name);
    stats::RELEASED.bump();
    Ok(())
}

/// Removes holder `token` whatever its lease, and the key with the last holder; only
/// the write (the caller propagates). False when `token` holds nothing here.
pub fn remove_holder(key: &mut LockKey, token: &[u8]) -> Result<bool, CommandError> {
    if let Some(removed) = remove_shared(key, token) {
        return removed;
    }
    match key.lock()? {
        Some(LockRef::Exclusive(held)) if held.is_token(token) => {
            follow_latest_lease(key, None)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Removes shared holder `token` (whether it was one), the key following the latest
/// lease left or going with the last holder; `None` when the lock is not held shared.
fn remove_shared(key: &mut LockKey, token: &[u8]) -> Option<Result<bool, CommandError>> {
    let set = key.shared_mut()?;
    if set.remove(token).is_none() {
        return Some(Ok(false));
    }
    let latest = set.latest_deadline();
    Some(follow_latest_lease(key, latest).map(|()| true))
}

/// After shared holders left: the key expires with the latest lease left, or goes with
/// the last holder.
fn follow_latest_lease(key: &LockKey, latest: Option<i64>) -> Result<(), CommandError> {
    let written = match latest {
        Some(latest) => key.set_deadline(latest),
        None => {
            let deleted = key.delete();
            unlinked::forget();
            deleted
        }
    };
    written.then_some(()).ok_or(CommandError::WriteFailed)
}

/// Removes the shared holders whose lease ended by `now_ms`, each announced as
/// `lock.expired` and propagated as its `LOCK.DROP`. Every write path runs this first,
/// so decisions see live holders only.
pub fn drop_ended(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    now_ms: i64,
) -> Result<(), CommandError> {
    let Some(set) = key.shared_mut() else {
        return Ok(());
    };
    let ended = set.take_ended(now_ms);
    if ended.is_empty() {
        return Ok(());
    }
    let latest = set.latest_deadline();
    follow_latest_lease(key, latest)?;
    for holder in &ended {
        let token = holder.holding().token();
        propagate(ctx, || replicate::drop_holder(ctx, name, &token));
        events::notify(ctx, events::EXPIRED, name);
        stats::EXPIRED.bump();
    }
    Ok(())
}

/// When the lock next changes by itself: the key's expiry (an exclusive lock's lease,
/// or whatever `PEXPIRE` set), or, sooner, when the earliest shared holder has ended (a
/// holder holds through its deadline's millisecond). `None` without an end.
pub fn next_lease_end(key: &LockKey, now_ms: i64) -> Option<i64> {
    let key_expires_at = key
        .remaining_ms()
        .map(|remaining| now_ms.saturating_add(remaining));
    let holder_ends_at = match key.lock() {
        Ok(Some(LockRef::Shared(set))) => set
            .earliest_deadline()
            .map(|earliest| earliest.saturating_add(1)),
        _ => None,
    };
    match (key_expires_at, holder_ends_at) {
        (Some(key_at), Some(holder_at)) => Some(key_at.min(holder_at)),
        (key_at, holder_at) => key_at.or(holder_at),
    }
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

/// The server evicted the mark `name`, which had admitted `fence`: the node's mark floor
/// rises to it, propagated as `LOCK.CLOCK last-fence mark-floor` after Redis's `DEL`.
pub fn mark_evicted(ctx: &Context, name: &RedisString, fence: u64) {
    stats::EVICTED_MARKS.bump();
    if node_fence::raise_mark_floor(fence) {
        node_state_form::replicate(ctx);
    }
    events::notify(ctx, events::MARK_EVICTED, name);
}
