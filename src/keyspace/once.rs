//! The writes of run once (`LOCK.ONCE`, `LOCK.DONE`, `LOCK.RECORD`): a claim becomes a
//! running record, `DONE` turns it into a done record, and each is propagated as its
//! effect form `LOCK.RECORD` with every clock-dependent value spelled out (the run's
//! token and fence, the absolute lease or keep deadline), announced and counted. A run
//! given up (release, lease end, `LOCK.CLOSE`) leaves the key as a mutex's release does
//! (`effects`), so nothing here handles it.

use fencelock_core::error::CommandError;
use fencelock_core::holding::{Extras, Holding};
use fencelock_core::once::OnceRecord;
use fencelock_core::token::Generated;
use fencelock_core::value::LockValue;
use redis_module::Context;

use super::{held_keys, lock_events as events, propagation, sessions};
use crate::ffi::lock_key::LockKey;
use crate::ffi::once_type::record_args;
use crate::ffi::replicate;
use crate::ffi::server::selected_db;
use crate::ffi::server_clock;
use crate::observing;
use crate::stats;

/// A run about to be granted.
pub struct NewRun<'a> {
    pub token: &'a [u8],
    /// The token was generated for this grant (these are its bytes).
    pub generated: Option<&'a Generated>,
    pub fence: u64,
    pub deadline_ms: i64,
    pub session: Option<&'a [u8]>,
    pub keep_ms: u64,
    pub fingerprint: Option<&'a [u8]>,
}

/// Makes the caller the running holder of a free `key`: an exclusive holding with the
/// claim's keep time and fingerprint, until `deadline_ms`. Propagated as `LOCK.RECORD
/// key RUNNING …`.
pub fn run(ctx: &Context, key: &mut LockKey, new: &NewRun) -> Result<(), CommandError> {
    let extras = Extras {
        session: new.session,
        ..Extras::default()
    };
    let holding = match new.generated {
        Some(generated) => Holding::pack_generated(generated, new.fence, extras),
        None => Holding::pack_with(new.token, new.fence, extras),
    }
    .ok_or(CommandError::InvalidToken)?;
    let record = OnceRecord::running(holding, new.keep_ms, new.fingerprint);
    let args = record_args(key.name().as_slice(), &record, Some(new.deadline_ms));
    observers_hear(ctx, key);
    if !key.store(LockValue::Once(record), new.deadline_ms) {
        return Err(CommandError::WriteFailed);
    }
    let name = key.name();
    let now_us = server_clock::now_micros();
    held_keys::granted(
        selected_db(ctx),
        name.as_slice(),
        new.fence,
        now_us,
        new.deadline_ms,
    );
    if let Some(session) = new.session {
        sessions::note(selected_db(ctx), name.as_slice(), session);
    }
    propagate(ctx, &args);
    events::notify(ctx, events::ACQUIRED, name);
    stats::ACQUIRED.bump();
    stats::ONCE_RUNS.bump();
    Ok(())
}

/// The running claim of `key` (whose holder the caller checked) becomes a done record
/// holding `result`, kept until `until_ms`. Propagated as `LOCK.RECORD key DONE …`,
/// announced as `lock.done`. Returns the run's fence.
pub fn store_done(
    ctx: &Context,
    key: &mut LockKey,
    result: &[u8],
    until_ms: i64,
) -> Result<u64, CommandError> {
    let running = key.once().ok_or(CommandError::WriteFailed)?;
    // The run's holding ends here: what follows is a record, not a holder.
    let run_fence = running.fence();
    let session = running
        .running_holding()
        .and_then(Holding::session)
        .map(std::borrow::Cow::into_owned);
    let done = OnceRecord::done(
        running.fence(),
        running.keep_ms(),
        running.fingerprint(),
        result,
    )
    .ok_or(CommandError::WriteFailed)?;
    let fence = done.fence();
    let args = record_args(key.name().as_slice(), &done, Some(until_ms));
    observers_hear(ctx, key);
    if !key.replace_value(LockValue::Once(done)) || !key.set_deadline(until_ms) {
        return Err(CommandError::WriteFailed);
    }
    let name = key.name();
    if let Some(session) = session {
        // The session no longer holds the key: its run is over.
        sessions::forget(&session, &(selected_db(ctx), name.as_slice().into()));
    }
    let now_us = server_clock::now_micros();
    held_keys::holding_ended(selected_db(ctx), name.as_slice(), run_fence, now_us, None);
    propagate(ctx, &args);
    events::notify(ctx, events::DONE, name);
    stats::ONCE_DONE.bump();
    Ok(fence)
}

/// Writes a record as `LOCK.RECORD` spells it (replica, AOF replay, a restore by
/// hand): only the write, the command propagates itself. Without `deadline_ms` the
/// key has no expiry until Redis's own `PEXPIREAT` follows (an AOF rewrite).
pub fn apply_record(
    ctx: &Context,
    key: &mut LockKey,
    record: Box<OnceRecord>,
    deadline_ms: Option<i64>,
) -> Result<(), CommandError> {
    let session = record
        .running_holding()
        .and_then(Holding::session)
        .map(std::borrow::Cow::into_owned);
    // A done record over the running claim it finishes (a replica applying its
    // primary's `LOCK.DONE`): that run's holding ends here, as it did on the primary.
    let finished_run = record
        .is_done()
        .then(|| key.once().filter(|running| !running.is_done()))
        .flatten()
        .map(OnceRecord::fence)
        .filter(|fence| *fence == record.fence());
    let fence_of_record = record.fence();
    let running = !record.is_done();
    observers_hear(ctx, key);
    let value = LockValue::Once(record);
    let stored = match (key.lock()?.is_some(), deadline_ms) {
        (true, deadline) => {
            key.replace_value(value) && deadline.is_none_or(|at| key.set_deadline(at))
        }
        (false, Some(deadline)) => key.store(value, deadline),
        (false, None) => key.store_without_deadline(value),
    };
    if !stored {
        return Err(CommandError::WriteFailed);
    }
    let now_us = server_clock::now_micros();
    let (db, name) = (selected_db(ctx), key.name().as_slice());
    if let Some(fence) = finished_run {
        held_keys::holding_ended(db, name, fence, now_us, None);
    }
    if running {
        let lease_end_ms = deadline_ms.unwrap_or(i64::MAX);
        held_keys::granted(db, name, fence_of_record, now_us, lease_end_ms);
    }
    if let Some(session) = session {
        sessions::note(selected_db(ctx), key.name().as_slice(), &session);
    }
    Ok(())
}

/// The running claim of `key` changed in place (its holder's value, `LOCK.PROCLAIM`):
/// propagated whole as its `LOCK.RECORD` with the lease's end, as a holding's change is
/// as its `LOCK.APPLY`. `false` when `key` holds no running claim.
pub fn propagate_running(ctx: &Context, key: &LockKey, lease_end_ms: Option<i64>) -> bool {
    let Some(record) = key.once().filter(|record| !record.is_done()) else {
        return false;
    };
    let args = record_args(key.name().as_slice(), record, lease_end_ms);
    propagate(ctx, &args);
    true
}

/// `key` is about to change what observers see of it.
fn observers_hear(ctx: &Context, key: &LockKey) {
    if observing::anyone_observing() {
        observing::note_changed(selected_db(ctx), key.name().as_slice());
    }
}

/// Propagates `LOCK.RECORD args`, or the command itself while nothing reads the stream.
fn propagate(ctx: &Context, args: &[Vec<u8>]) {
    if propagation::effects_needed(ctx) {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        ctx.replicate("LOCK.RECORD", args.as_slice());
    } else {
        replicate::verbatim(ctx);
    }
}
