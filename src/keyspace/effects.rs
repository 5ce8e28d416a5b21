//! Applying a decision to the keyspace: write the key, replicate the *effect* (explicit
//! token, fence and absolute deadline, never the clock-dependent command), announce it
//! as a keyspace event and count it. Every write of a lock goes through here (one
//! `put_holder` for grants and applies, one rule for the key's expiry), so replicas and
//! the AOF see exactly what the primary did; each write returns the `Change` it made,
//! which `blocking::after` follows up. (While nothing reads the replication stream at
//! all, `propagation` lets the command stand for itself.)

use std::borrow::Cow;

use fencelock_core::error::CommandError;
use fencelock_core::holding::{Extras, Holding};
use fencelock_core::lock;
use fencelock_core::mode::Mode;
use fencelock_core::shared::{SharedHolder, SharedHolders};
use fencelock_core::token::Generated;
use fencelock_core::value::{LockRef, LockValue};
use redis_module::{Context, RedisString};

use super::{held_keys, lock_events, propagation, sessions, unlinked};
use crate::ffi::lock_key::LockKey;
use crate::ffi::mark_key::MarkKey;
use crate::ffi::node_state_form;
use crate::ffi::replicate;
use crate::ffi::server::selected_db;
use crate::ffi::server_clock;
use crate::node_fence;
use crate::observing;
use crate::stats;

/// What a write did to a lock, for `blocking::after` to follow up on (handoffs, lease
/// timers): each effect says it, so no command has to remember its own recipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new holder in this mode (a grant).
    Granted(Mode),
    /// A holder's lease moved (a refresh, or a holder's same-token retry).
    Extended,
    /// A holder left (a release): its room may go to the queue.
    Released,
    /// A holder was removed by its effect form (`LOCK.DROP`).
    Dropped,
    /// A holding was written by its effect form (`LOCK.APPLY`) in this mode.
    Applied(Mode),
}

/// A grant about to be made.
#[derive(Clone, Copy)]
pub struct NewHolder<'a> {
    pub token: &'a [u8],
    pub fence: u64,
    pub deadline_ms: i64,
    pub mode: Mode,
    /// The token was generated for this grant (these are its bytes), so it holds
    /// nothing here yet and is stored without decoding its hex.
    pub generated: Option<&'a Generated>,
    /// The holding's session and lock-delay.
    pub extras: Extras<'a>,
    /// The wall clock (µs) the fence was issued at: when the holding begins.
    pub now_us: u64,
}

/// Makes `token` a holder under `fence` until `deadline_ms`, in `mode`: the key's value
/// for an exclusive grant or the first shared holder, one more holder otherwise (the
/// caller decided it fits). Propagated as `LOCK.APPLY key token fence PXAT deadline`,
/// with `SHARED` or `LIMIT n` for a shared holder, and its `SESSION` and `LOCKDELAY`.
pub fn grant(ctx: &Context, key: &mut LockKey, new: &NewHolder) -> Result<Change, CommandError> {
    let NewHolder {
        token,
        fence,
        deadline_ms,
        mode,
        generated,
        extras,
        now_us,
    } = *new;
    let holding = match generated {
        Some(generated) => Holding::pack_generated(generated, fence, extras),
        None => Holding::pack_with(token, fence, extras),
    }
    .ok_or(CommandError::InvalidToken)?;
    put_holder(
        ctx,
        key,
        holding,
        Some(deadline_ms),
        mode,
        generated.is_some(),
        now_us,
    )?;
    let name = key.name();
    if let Some(session) = extras.session {
        sessions::note(selected_db(ctx), name.as_slice(), session);
    }
    propagate(ctx, || {
        replicate::grant(ctx, name, token, fence, deadline_ms, mode, extras)
    });
    lock_events::notify(ctx, lock_events::ACQUIRED, name);
    stats::ACQUIRED.bump();
    Ok(Change::Granted(mode))
}

/// Writes a holding as `LOCK.APPLY` spells it: exclusive, the key's value (with no
/// `deadline`, Redis's own `PEXPIREAT` follows, as in an AOF rewrite); shared, one more
/// holder of a set in `mode` or a new set replacing a lock in another mode. Only the
/// write: the command propagates itself.
pub fn apply(
    ctx: &Context,
    key: &mut LockKey,
    holding: Box<Holding>,
    deadline_ms: Option<i64>,
    mode: Mode,
) -> Result<Change, CommandError> {
    let session = holding.session().map(Cow::into_owned);
    put_holder(
        ctx,
        key,
        holding,
        deadline_ms,
        mode,
        false,
        server_clock::now_micros(),
    )?;
    if let Some(session) = session {
        sessions::note(selected_db(ctx), key.name().as_slice(), &session);
    }
    Ok(Change::Applied(mode))
}

/// The one write of a holder, for grants and applies. A shared holder joins a set of
/// its mode (its token looked up unless `fresh`) or starts one; the key's expiry stays
/// the latest lease. The index of held keys notes it as begun at `now_us` (or at its
/// fence, if older: a holding applied from a primary or the AOF counts from its grant).
fn put_holder(
    ctx: &Context,
    key: &mut LockKey,
    holding: Box<Holding>,
    deadline_ms: Option<i64>,
    mode: Mode,
    fresh: bool,
    now_us: u64,
) -> Result<(), CommandError> {
    observers_hear(ctx, key);
    let fence = holding.fence();
    let lease_end_ms = match mode {
        Mode::Exclusive => deadline_ms.unwrap_or(i64::MAX),
        _ => i64::MAX,
    };
    let stored = match (mode, deadline_ms) {
        (Mode::Exclusive, None) => key.store_without_deadline(LockValue::Exclusive(holding)),
        // The key stays through the lock-delay, quarantined once the lease is over.
        (Mode::Exclusive, Some(deadline)) => {
            let mut holding = holding;
            holding.set_lease_end(deadline);
            let expires_at = deadline.saturating_add(lock_delay(&holding));
            key.store(LockValue::Exclusive(holding), expires_at)
        }
        // A shared holder's lease is its own: it must be spelled out.
        (_, None) => return Err(CommandError::Syntax),
        (_, Some(deadline)) => match key.shared_mut().filter(|set| set.mode() == mode) {
            Some(set) => {
                if fresh {
                    set.insert(holding, deadline)?;
                } else {
                    set.put(holding, deadline)?;
                }
                let oldest = held_keys::oldest_fence(set);
                follow_latest_lease(ctx, key)?;
                held_keys::joined(
                    selected_db(ctx),
                    key.name().as_slice(),
                    fence,
                    oldest,
                    now_us,
                );
                return Ok(());
            }
            None => {
                let mut set = SharedHolders::new(mode);
                set.insert(holding, deadline)?;
                // The holder's lease, and its lock-delay if it has one.
                let expires_at = set.latest_deadline().unwrap_or(deadline);
                key.store(LockValue::Shared(set), expires_at)
            }
        },
    };
    if stored {
        // After the store: replacing a value unlinks the old one, which forgets the name.
        held_keys::granted(
            selected_db(ctx),
            key.name().as_slice(),
            fence,
            now_us,
            lease_end_ms,
        );
    }
    stored.then_some(()).ok_or(CommandError::WriteFailed)
}

/// Moves the lease of holder `token` to end at `deadline_ms`: the key's expiry for an
/// exclusive lock (propagated as `PEXPIREAT key deadline`), the holder's own for a shared
/// one (propagated as its `LOCK.APPLY`), the key's then following the latest lease.
pub fn extend(
    ctx: &Context,
    key: &mut LockKey,
    token: &[u8],
    deadline_ms: i64,
) -> Result<Change, CommandError> {
    let name = key.name();
    let Some(set) = key.shared_mut() else {
        return extend_exclusive(ctx, key, token, deadline_ms);
    };
    let carried = set
        .holder(token)
        .map(|holder| Carried::of(holder.holding()))
        .ok_or(CommandError::WriteFailed)?;
    set.set_deadline(token, deadline_ms);
    let mode = set.mode();
    follow_latest_lease(ctx, key)?;
    carried.propagate(ctx, name, token, deadline_ms, mode);
    Ok(announce_extended(ctx, name))
}

/// `extend` of an exclusive holder: the key's expiry moves (propagated as `PEXPIREAT`),
/// and with a lock-delay the holding's own lease end too (propagated as its whole
/// `LOCK.APPLY`, which carries it).
fn extend_exclusive(
    ctx: &Context,
    key: &mut LockKey,
    token: &[u8],
    deadline_ms: i64,
) -> Result<Change, CommandError> {
    let name = key.name();
    let Some(holding) = key.exclusive_mut() else {
        return Err(CommandError::WriteFailed);
    };
    // A lease whose key could not outlast it by the delay is refused, never cut short.
    let expires_at = deadline_ms
        .checked_add(lock_delay(holding))
        .ok_or(CommandError::InvalidExpire("lock.refresh"))?;
    let fence = holding.fence();
    let delayed = holding.lease_end_ms().is_some().then(|| {
        holding.set_lease_end(deadline_ms);
        Carried::of(holding)
    });
    // Observers look again: a lease moved sooner must wake them at its new end.
    observers_hear(ctx, key);
    if !key.set_deadline(expires_at) {
        return Err(CommandError::WriteFailed);
    }
    held_keys::extended(selected_db(ctx), name.as_slice(), fence, deadline_ms);
    match delayed {
        Some(carried) => carried.propagate(ctx, name, token, deadline_ms, Mode::Exclusive),
        None => propagate(ctx, || replicate::deadline(ctx, name, expires_at)),
    }
    Ok(announce_extended(ctx, name))
}

/// What a holding's `LOCK.APPLY` carries besides its token and deadline, copied out so
/// that the key can be written meanwhile.
struct Carried {
    fence: u64,
    session: Option<Vec<u8>>,
    lock_delay_ms: u64,
    value: Option<Vec<u8>>,
}

impl Carried {
    fn of(holding: &Holding) -> Self {
        let (session, lock_delay_ms) = holding.extras();
        Carried {
            fence: holding.fence(),
            session: session.map(Cow::into_owned),
            lock_delay_ms,
            value: holding.value().map(<[u8]>::to_vec),
        }
    }

    /// Propagates the holding as `LOCK.APPLY key token fence PXAT deadline …`.
    fn propagate(
        &self,
        ctx: &Context,
        name: &RedisString,
        token: &[u8],
        deadline: i64,
        mode: Mode,
    ) {
        let extras = self.extras();
        propagate(ctx, || {
            replicate::grant(ctx, name, token, self.fence, deadline, mode, extras)
        });
    }

    fn extras(&self) -> Extras<'_> {
        Extras {
            session: self.session.as_deref(),
            lock_delay_ms: self.lock_delay_ms,
            value: self.value.as_deref(),
        }
    }
}

/// `key` is about to change what observers see of it (`observing` looks before the
/// event loop sleeps).
fn observers_hear(ctx: &Context, key: &LockKey) {
    // Checked first: the common case, nobody observing, asks Redis for nothing.
    if observing::anyone_observing() {
        observing::note_changed(selected_db(ctx), key.name().as_slice());
    }
}

/// Makes `value` the public value of the exclusive holding of `key` (the caller found
/// the token holding it), its fence, lease and session unchanged; propagated as the
/// holding's whole `LOCK.APPLY` (with the lease end as `PXAT`, none for a permanent
/// lock). A value equal to the one it has changes nothing; `false` then.
pub fn proclaim(ctx: &Context, key: &mut LockKey, value: &[u8]) -> Result<bool, CommandError> {
    let wanted = Some(value).filter(|value| !value.is_empty());
    let holding = key.exclusive_mut().ok_or(CommandError::WriteFailed)?;
    if holding.value() == wanted {
        return Ok(false);
    }
    let replaced = holding
        .with_value(wanted)
        .ok_or(CommandError::ValueTooLong)?;
    let token = replaced.token().into_owned();
    let carried = Carried::of(&replaced);
    let lease_end = key.lease_deadline_ms();
    // With a lock-delay the key's expiry is derived from the holding, as every other
    // write derives it (and as its `LOCK.APPLY` makes a replica or the AOF derive it):
    // one a `PERSIST` or `PEXPIRE` set by hand does not outlive the proclaim.
    let derived_expiry = replaced
        .lease_end_ms()
        .filter(|&end| end != i64::MAX)
        .map(|end| end.saturating_add(lock_delay(&replaced)));
    observers_hear(ctx, key);
    if !key.replace_exclusive(replaced) {
        return Err(CommandError::WriteFailed);
    }
    if let Some(expires_at) = derived_expiry {
        if !key.set_deadline(expires_at) {
            return Err(CommandError::WriteFailed);
        }
    }
    let name = key.name();
    match lease_end {
        // A running run-once claim is propagated whole, as what it is.
        _ if super::once::propagate_running(ctx, key, lease_end) => {}
        Some(end) => carried.propagate(ctx, name, &token, end, Mode::Exclusive),
        None => propagate(ctx, || {
            replicate::permanent_grant(ctx, name, &token, carried.fence, carried.extras())
        }),
    }
    lock_events::notify(ctx, lock_events::PROCLAIMED, name);
    stats::PROCLAIMS.bump();
    Ok(true)
}

/// A holding's lock-delay in ms, as a key's expiry adds it.
fn lock_delay(holding: &Holding) -> i64 {
    i64::try_from(holding.lock_delay_ms()).unwrap_or(i64::MAX)
}

fn announce_extended(ctx: &Context, name: &RedisString) -> Change {
    lock_events::notify(ctx, lock_events::REFRESHED, name);
    stats::REFRESHED.bump();
    Change::Extended
}

/// Holder `token` (which the caller found holding) leaves: an exclusive lock's key is
/// deleted (propagated as `DEL key`); a shared holder is removed (`LOCK.DROP key
/// token`), and the key with the last one.
pub fn release(ctx: &Context, key: &mut LockKey, token: &[u8]) -> Result<Change, CommandError> {
    let name = key.name();
    if key.shared_mut().is_some() {
        if !remove_shared(ctx, key, token)? {
            return Err(CommandError::WriteFailed);
        }
        propagate(ctx, || replicate::drop_holder(ctx, name, token));
    } else {
        // Its holding's end is recorded with the key's deletion.
        delete_lock(ctx, key)?;
        propagate(ctx, || replicate::delete(ctx, name));
    }
    lock_events::notify(ctx, lock_events::RELEASED, name);
    stats::RELEASED.bump();
    Ok(Change::Released)
}

/// Removes holder `token` whatever its lease, and the key with the last holder; only
/// the write (the command propagates itself). `None` when `token` holds nothing here.
pub fn remove_holder(
    ctx: &Context,
    key: &mut LockKey,
    token: &[u8],
) -> Result<Option<Change>, CommandError> {
    let removed = match key.lock()? {
        Some(LockRef::Shared(_)) => remove_shared(ctx, key, token)?,
        Some(LockRef::Exclusive(held)) if held.is_token(token) => {
            follow_latest_lease(ctx, key)?;
            true
        }
        _ => false,
    };
    Ok(removed.then_some(Change::Dropped))
}

/// Removes shared holder `token` (whether it was one), the key following the latest
/// lease left or going with the last holder.
fn remove_shared(ctx: &Context, key: &mut LockKey, token: &[u8]) -> Result<bool, CommandError> {
    let Some(removed) = key.shared_mut().and_then(|set| set.remove(token)) else {
        return Ok(false);
    };
    let oldest = key
        .shared_mut()
        .and_then(|set| held_keys::oldest_fence(set));
    let (name, fence) = (key.name().as_slice(), removed.holding().fence());
    let now_us = server_clock::now_micros();
    held_keys::holding_ended(selected_db(ctx), name, fence, now_us, oldest);
    forget_sessions_left(ctx, key, std::slice::from_ref(&removed));
    follow_latest_lease(ctx, key)?;
    Ok(true)
}

/// Shared holders left the lock open as `key`: a session none of whose holders is left
/// here no longer holds it (the index forgets it here). Looks at the set only for
/// holders that had a session.
fn forget_sessions_left(ctx: &Context, key: &mut LockKey, left: &[SharedHolder]) {
    let gone: Vec<Cow<[u8]>> = left
        .iter()
        .filter_map(|holder| holder.holding().session())
        .collect();
    if gone.is_empty() {
        return;
    }
    let name = key.name().as_slice();
    let set = key.shared_mut();
    for session in &gone {
        let still_here = set.as_deref().is_some_and(|set| {
            set.has_sessions() && set.all().any(|h| h.holding().in_session(Some(session)))
        });
        if !still_here {
            sessions::forget(session, &(selected_db(ctx), name.into()));
        }
    }
}

/// The one rule of a lock key's expiry after its holders changed: a shared lock's key
/// expires with its latest lease, and goes with its last holder (as does an exclusive
/// lock's, whose holder left).
fn follow_latest_lease(ctx: &Context, key: &LockKey) -> Result<(), CommandError> {
    observers_hear(ctx, key);
    let latest = match key.lock()? {
        Some(LockRef::Shared(set)) => set.latest_deadline(),
        _ => None,
    };
    match latest {
        Some(latest) => key
            .set_deadline(latest)
            .then_some(())
            .ok_or(CommandError::WriteFailed),
        None => delete_key(key),
    }
}

/// An exclusive lock's holder left: its key goes (`follow_latest_lease` without the
/// look at the value the caller already took).
fn delete_lock(ctx: &Context, key: &LockKey) -> Result<(), CommandError> {
    observers_hear(ctx, key);
    delete_key(key)
}

/// Deletes a lock key whose last holder left.
fn delete_key(key: &LockKey) -> Result<(), CommandError> {
    let deleted = key.delete();
    // What the key still held (an exclusive holding; a shared set's holders were taken
    // out, and counted, before) ends here.
    unlinked::deleted_by_us();
    deleted.then_some(()).ok_or(CommandError::WriteFailed)
}

/// Removes the shared holders whose lease ended by `now_ms`, each announced as
/// `lock.expired` and propagated as its `LOCK.DROP`. Every write path runs this first,
/// so decisions see live holders only.
pub fn drop_ended(ctx: &Context, key: &mut LockKey, now_ms: i64) -> Result<(), CommandError> {
    let Some(set) = key.shared_mut() else {
        return Ok(());
    };
    let ended = set.take_ended(now_ms);
    if ended.is_empty() {
        return Ok(());
    }
    let oldest = held_keys::oldest_fence(set);
    forget_sessions_left(ctx, key, &ended);
    follow_latest_lease(ctx, key)?;
    let name = key.name();
    for holder in &ended {
        // It ended with its lease, which may be a moment before this write noticed.
        let ended_us = u64::try_from(holder.deadline_ms().min(now_ms))
            .unwrap_or(0)
            .saturating_mul(1000);
        let fence = holder.holding().fence();
        held_keys::holding_ended(selected_db(ctx), name.as_slice(), fence, ended_us, oldest);
        let token = holder.holding().token();
        propagate(ctx, || replicate::drop_holder(ctx, name, &token));
        lock_events::notify(ctx, lock_events::EXPIRED, name);
        stats::EXPIRED.bump();
    }
    Ok(())
}

/// When the lock next changes by itself (see `lock::next_change`). `None` without an
/// end.
pub fn next_lease_end(key: &LockKey, now_ms: i64) -> Option<i64> {
    let key_expires_at = key
        .remaining_ms()
        .map(|remaining| now_ms.saturating_add(remaining));
    let earliest_holder = match key.lock() {
        Ok(Some(LockRef::Shared(set))) => set.earliest_deadline(),
        _ => None,
    };
    lock::next_change(key_expires_at, earliest_holder)
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
    lock_events::notify(ctx, lock_events::MARK_RAISED, name);
    Ok(())
}

/// The mark now under `name` was renamed or moved here from another name or database:
/// it left the data it guarded there, whose writers now find no mark, as after an
/// eviction. So its fence becomes the node's mark floor (propagated as `LOCK.CLOCK`),
/// and no missing mark admits a fence below it. A key here that is no mark changes
/// nothing.
pub fn mark_moved(ctx: &Context, name: &RedisString) {
    let Ok(Some(fence)) = MarkKey::open(ctx, name, false).highest() else {
        return;
    };
    if node_fence::raise_mark_floor(fence) {
        node_state_form::replicate(ctx);
    }
}

/// The server evicted (or expired) the mark `name`, which had admitted `fence`: the
/// node's mark floor rises to it, propagated as `LOCK.CLOCK last-fence mark-floor` with
/// Redis's `DEL`.
pub fn mark_lost(ctx: &Context, name: &RedisString, fence: u64, evicted: bool) {
    if node_fence::raise_mark_floor(fence) {
        node_state_form::replicate(ctx);
    }
    if evicted {
        stats::EVICTED_MARKS.bump();
        lock_events::notify(ctx, lock_events::MARK_EVICTED, name);
    } else {
        lock_events::notify(ctx, lock_events::MARK_EXPIRED, name);
    }
}
