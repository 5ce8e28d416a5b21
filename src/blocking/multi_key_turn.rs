//! The turn of a wait for several keys (`LOCK.ACQUIREALL … BLOCK`) when it stands first
//! in one of its queues: granted every key at once when it stands first in all of them
//! and all admit it, refused when one of them is held in another mode, or left where
//! it is. While it waits it keeps its place at the head: a key it was first for stays
//! free rather than go to someone behind it (no partial holding, and no overtaking).

use fencelock_core::error::CommandError;
use fencelock_core::fifo_queue::Ticket;
use fencelock_core::lock::{self, AcquireRequest, Step};
use fencelock_core::token::Generated;
use fencelock_core::wait_registry::Taken;
use redis_module::{Context, RedisString};

use super::callbacks::{Delivery, LockWaiting};
use super::{after, answer_same_token, key_changed, left_queues, wait_over, with_registry, KeyId};
use crate::config;
use crate::ffi::blocked::{self, BlockedClient};
use crate::ffi::lock_key::LockKey;
use crate::ffi::server_clock;
use crate::keyspace::all_or_none::{self, Grant};
use crate::keyspace::{effects, lock_events};
use crate::stats;

/// What came of a turn.
pub(super) enum Turn {
    Granted,
    Refused,
    Waits,
}

/// The wait `ticket`, first in `id`'s queue (open as `key`), takes its turn.
pub(super) fn take_turn(ctx: &Context, key: &mut LockKey, id: &KeyId, ticket: Ticket) -> Turn {
    let head = with_registry(|r| {
        r.head(id)
            .filter(|head| head.ticket == ticket)
            .map(|head| (head.waiter.wanted.clone(), head.waiter.blocked_on))
    });
    let Some((wanted, blocked_on)) = head else {
        return Turn::Waits;
    };
    let now_ms = server_clock::now_ms();
    let limits = config::limits();
    let request = AcquireRequest {
        token: wanted.token.as_deref().unwrap_or_default(),
        mode: wanted.mode,
        max_holders: limits.max_holders,
        queued_before: false,
        fresh_token: wanted.token.is_none(),
        session: wanted.session.as_deref(),
    };
    let from = blocked_on.unwrap_or(0);
    if let Some(waits_at) = first_untaken(ctx, key, id, ticket, from, &request, now_ms) {
        with_registry(|r| {
            if let Some(waiter) = r.waiter_mut(ticket) {
                waiter.blocked_on = Some(waits_at);
            }
        });
        return Turn::Waits;
    }
    // Every key found takeable: one look at all of them, the queues first.
    let keys = with_registry(|r| match r.not_first_at(ticket) {
        Some(behind) => {
            stats::HANDOFF_LOOKS.add(behind as u64 + 1);
            if let Some(waiter) = r.waiter_mut(ticket) {
                waiter.blocked_on = Some(behind);
            }
            None
        }
        None => r.head(id).map(|head| head.keys.to_vec()),
    });
    let Some(ids) = keys else {
        return Turn::Waits;
    };
    // Every key of one wait is in the database it was asked in, the one selected now.
    let names: Vec<RedisString> = ids
        .iter()
        .filter(|other| *other != id)
        .map(|(_, name)| RedisString::create_from_slice(ctx.ctx, name))
        .collect();
    let mut others: Vec<LockKey> = names
        .iter()
        .map(|name| LockKey::open(ctx, name, true))
        .collect();
    for other in &mut others {
        // A failed drop leaves the ended holders counted as gone by every decision.
        let _ = effects::drop_ended(ctx, other, now_ms);
    }
    let mut keys = InOrder {
        ids: &ids,
        id,
        key,
        others: &mut others,
    };
    // The queues and the keys: two looks a key.
    stats::HANDOFF_LOOKS.add(2 * ids.len() as u64);
    let steps = keys.each(|each| step_of(each, &request, now_ms));
    let refusal = steps.iter().zip(&ids).find_map(|(step, (_, name))| {
        let error = match step {
            Step::WrongMode(held) => CommandError::WrongMode(*held),
            Step::WrongSession => CommandError::WrongSession,
            _ => return None,
        };
        Some(error.message_for_key(name).into_owned())
    });
    if let Some(refusal) = refusal {
        refuse(ctx, ticket, refusal);
        return Turn::Refused;
    }
    if let Some(busy) = steps.iter().position(|step| *step == Step::Busy) {
        with_registry(|r| {
            if let Some(waiter) = r.waiter_mut(ticket) {
                waiter.blocked_on = Some(busy);
            }
        });
        return Turn::Waits;
    }
    grant(ctx, &mut keys, &steps, ticket, &wanted)
}

/// The position of the first of the wait's keys, from `from` on, that keeps it waiting
/// (it is not first in that queue, or the key is busy for it), each key opened in turn
/// and closed before the next; `None` once none does, or one refuses the wait (the look
/// at every key that follows answers the refusal).
///
/// The keys before `from` were found the wait's to take at an earlier turn, and stay so
/// as far as the queues go: it stands first in their queues, where nobody is granted
/// past it. So a turn looks only at keys not found takeable yet, and a wait whose n keys
/// are freed one by one looks at each a few times in all, not n times. What changed
/// them by hand meanwhile (a `RESTORE`, a `SET`) the look at every key before a grant
/// sees.
fn first_untaken(
    ctx: &Context,
    key: &mut LockKey,
    id: &KeyId,
    ticket: Ticket,
    from: usize,
    request: &AcquireRequest,
    now_ms: i64,
) -> Option<usize> {
    let mut at = from;
    while let Some((other, first)) = with_registry(|r| r.key_at(ticket, at)) {
        stats::HANDOFF_LOOKS.bump();
        if !first {
            return Some(at);
        }
        let step = if other == *id {
            step_of(key, request, now_ms)
        } else {
            let name = RedisString::create_from_slice(ctx.ctx, &other.1);
            let mut open = LockKey::open(ctx, &name, true);
            // A failed drop leaves the ended holders counted as gone by every decision.
            let _ = effects::drop_ended(ctx, &mut open, now_ms);
            step_of(&open, request, now_ms)
        };
        match step {
            Step::Busy => return Some(at),
            Step::WrongMode(_) | Step::WrongSession => return None,
            Step::Admit | Step::Renew { .. } => at += 1,
        }
    }
    None
}

/// What the wait's acquire would do to one key. A key holding another value is busy:
/// the wait stays (as a single-key wait does) rather than overwrite it.
fn step_of(key: &LockKey, request: &AcquireRequest, now_ms: i64) -> Step {
    match key.lock() {
        Ok(current) => lock::step(current, request, now_ms),
        Err(_) => Step::Busy,
    }
}

/// The keys of one wait, open: the one whose queue is being settled, and the others.
struct InOrder<'k, 'a, 'b> {
    ids: &'k [KeyId],
    id: &'k KeyId,
    key: &'k mut LockKey<'a>,
    others: &'k mut [LockKey<'b>],
}

impl InOrder<'_, '_, '_> {
    /// Runs `f` on every key in the order the wait asked for them.
    fn each<R>(&mut self, mut f: impl FnMut(&mut LockKey) -> R) -> Vec<R> {
        let mut others = self.others.iter_mut();
        let mut out = Vec::with_capacity(self.ids.len());
        for each in self.ids {
            if each == self.id {
                out.push(f(self.key));
            } else if let Some(other) = others.next() {
                out.push(f(other));
            }
        }
        out
    }
}

/// Grants every key to the wait and unblocks it with `[token, [fences]]` (or with nil
/// when the grant cannot be made).
fn grant(
    ctx: &Context,
    keys: &mut InOrder,
    steps: &[Step],
    ticket: Ticket,
    wanted: &super::Wanted,
) -> Turn {
    let Some(Taken { client, waiter, .. }) = with_registry(|r| r.take_ticket(ticket)) else {
        return Turn::Waits;
    };
    wait_over(ctx, &waiter);
    let generated = wanted.token.is_none().then(Generated::fresh);
    let token = wanted
        .token
        .clone()
        .or_else(|| generated.map(|generated| generated.hex().to_vec()))
        .unwrap_or_default();
    let max_ttl_ms = config::limits().max_ttl_ms;
    let grant = Grant {
        token: &token,
        generated: generated.as_ref(),
        mode: wanted.mode,
        deadline_ms: lock::waiter_deadline(server_clock::now_ms(), wanted.ttl_ms, max_ttl_ms),
        extras: wanted.extras(),
    };
    let Ok(plan) = all_or_none::plan(steps) else {
        return answer_nil(ctx, client, keys.ids);
    };
    let mut planned = plan.into_iter();
    let written = keys.each(|each| {
        let part = planned.next()?;
        Some(all_or_none::write(ctx, each, &grant, part))
    });
    let made: Option<Vec<_>> = written
        .iter()
        .map(|each| each.as_ref().and_then(|made| made.as_ref().ok()).copied())
        .collect();
    let Some(made) = made else {
        let mut results = written.into_iter();
        keys.each(|each| {
            if let Some(Some(Ok(made))) = results.next() {
                all_or_none::give_back(ctx, each, &made, &token);
            }
        });
        return answer_nil(ctx, client, keys.ids);
    };
    let db = super::selected_db(ctx);
    let mut parts = made.iter();
    let held = (wanted.mode, wanted.session.as_deref());
    let grants = keys.each(|each| {
        let made = parts.next().copied()?;
        let id: KeyId = (db, each.name().as_slice().to_vec());
        lock_events::notify(ctx, lock_events::HANDOFF, each.name());
        stats::HANDOFFS.bump();
        if wanted.token.is_some() {
            answer_same_token(ctx, each, &id, &token, made.fence, held);
        }
        after(ctx, each, made.change);
        // The waits behind it in each queue are looked at again (shared ones may join).
        key_changed(ctx, db, &id.1);
        Some((id.1, made.fence, made.fresh))
    });
    with_registry(|r| r.reply_pending(waiter.client_id));
    let delivery = Delivery::GrantedAll {
        client_id: waiter.client_id,
        db,
        token,
        grants: grants.into_iter().flatten().collect(),
        delivered: false,
    };
    blocked::unblock::<LockWaiting>(client, Some(delivery));
    Turn::Granted
}

/// Nothing could be granted: the waiter is answered nil, and the queues behind it move.
fn answer_nil(ctx: &Context, client: BlockedClient, ids: &[KeyId]) -> Turn {
    blocked::unblock::<LockWaiting>(client, None);
    left_queues(ctx, ids.iter().cloned());
    Turn::Refused
}

/// The wait's turn came, but one of its keys is held in a mode that refuses it.
fn refuse(ctx: &Context, ticket: Ticket, refusal: String) {
    let Some(taken) = with_registry(|r| r.take_ticket(ticket)) else {
        return;
    };
    wait_over(ctx, &taken.waiter);
    blocked::unblock::<LockWaiting>(taken.client, Some(Delivery::Refused(refusal)));
    left_queues(ctx, taken.keys);
}
