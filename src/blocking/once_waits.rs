//! The waits of run-once duplicates (`LOCK.ONCE … BLOCK`): they queue with the lock's
//! other waiters, FIFO. A run given up without `LOCK.DONE` frees the key, and the
//! handoff grants the first waiting duplicate the next run (`run`, under a fresh,
//! higher fence: the retry of a failed attempt). `LOCK.DONE` answers every waiting
//! duplicate of the key at once with the result (`answer_done`); plain acquires keep
//! waiting, as the done record admits no lock until its keep time is over.

use fencelock_core::error::CommandError;
use fencelock_core::once::fingerprint_matches;
use fencelock_core::token::Generated;
use fencelock_core::wait_registry::Taken;
use redis_module::Context;

use super::callbacks::{Delivery, LockWaiting};
use super::{wait_over, with_registry, KeyId, Wanted};
use crate::config;
use crate::ffi::blocked;
use crate::ffi::lock_key::LockKey;
use crate::ffi::server::selected_db;
use crate::ffi::server_clock as clock;
use crate::keyspace::once::{self, NewRun};
use crate::stats;
use fencelock_core::lock;

/// What a waiting `LOCK.ONCE` claims besides its lease.
#[derive(Clone)]
pub struct OnceWanted {
    /// The key it waits for (a claim waits for one key).
    pub key: KeyId,
    pub keep_ms: u64,
    pub fingerprint: Option<Vec<u8>>,
}

/// Grants the first waiting duplicate (`wanted`) the run of `key` under `fence`.
pub(super) fn run(
    ctx: &Context,
    key: &mut LockKey,
    once: &OnceWanted,
    wanted: &Wanted,
    (token, generated): (&[u8], Option<&Generated>),
    fence: u64,
) -> Result<(), CommandError> {
    let deadline_ms =
        lock::waiter_deadline(clock::now_ms(), wanted.ttl_ms, config::limits().max_ttl_ms);
    let new = NewRun {
        token,
        generated,
        fence,
        deadline_ms,
        session: wanted.session.as_deref(),
        keep_ms: once.keep_ms,
        fingerprint: once.fingerprint.as_deref(),
    };
    once::run(ctx, key, &new)?;
    stats::ONCE_RETRIES.bump();
    Ok(())
}

/// `LOCK.DONE` stored `result` of the run under `fence` at `key`: every duplicate
/// waiting for it is answered `[nil, fence, result]` (one that asked with another
/// fingerprint, `FINGERPRINT`). Returns how many were answered.
pub fn answer_done(
    ctx: &Context,
    key: &LockKey,
    fence: u64,
    fingerprint: Option<&[u8]>,
    result: &[u8],
) -> usize {
    if !super::anyone_waiting() {
        return 0;
    }
    let id: KeyId = (selected_db(ctx), key.name().as_slice().to_vec());
    // The duplicates of this key stand in its queue: only that queue is walked.
    let taken = with_registry(|r| {
        r.take_from_key_where(&id, |waiter| {
            let once = waiter.wanted.once.as_ref();
            once.is_some_and(|once| once.key == id)
        })
    });
    let answered = taken.len();
    for Taken { client, waiter, .. } in taken {
        wait_over(ctx, &waiter);
        let asked = waiter
            .wanted
            .once
            .as_ref()
            .and_then(|o| o.fingerprint.as_deref());
        let delivery = if fingerprint_matches(fingerprint, asked) {
            stats::ONCE_REPLAYS.bump();
            Delivery::Replayed {
                fence,
                result: result.to_vec(),
            }
        } else {
            stats::ONCE_FINGERPRINT_REFUSED.bump();
            Delivery::Refused(CommandError::Fingerprint.message().into_owned())
        };
        blocked::unblock::<LockWaiting>(client, Some(delivery));
    }
    super::timers::stop_abandoned_checks(ctx);
    answered
}
