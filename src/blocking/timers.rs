//! Handoffs that do not happen inside a release: after Redis announces that a waited-for
//! key changed (expiry, DEL, FLUSHALL, RENAME, MOVE, SWAPDB, RESTORE, eviction, a new
//! deadline from PEXPIRE or PERSIST), and when a holder's lease ends (a timer per
//! waited-for key, so waiters do not depend on Redis's active expiry, which can take
//! seconds to reach a key in a large volatile keyspace).

use std::time::Duration;

use redis_module::{Context, RedisString};

use super::{anyone_waiting, hand_off, has_waiters, key_moved, with_registry, KeyId};
use crate::ffi::lock_key::LockKey;
use crate::ffi::post_jobs::{self, Job};
use crate::ffi::server::{select_db, selected_db, slot_served_elsewhere, writes, Writes};
use crate::ffi::server_clock;
use crate::ffi::timers::{self, Timer};
use crate::keyspace::effects;
use fencelock_core::wait_registry::ExpiryCheck;

/// How long to wait before retrying a handoff while Redis has writes (and with them
/// expiry) paused, e.g. during `FAILOVER` or `CLIENT PAUSE WRITE`.
pub(super) const PAUSED_RETRY_MS: i64 = 10;

/// Redis announced a change to `name` (it disappeared, or got a new value or deadline).
/// Handing off inside that announcement would write under the feet of the command that
/// caused it, so the queue is settled right after: a free key goes to the first waiter,
/// a held one is re-timed to its deadline. Where the server runs post-notification
/// jobs (7.2+, Valkey) that is in the same step, before any other client's command;
/// on Redis 7.0 from a timer, and meanwhile every acquire settles the queue first, so
/// nobody overtakes the waiters.
pub fn key_announced(ctx: &Context, db: i32, name: &[u8]) {
    let Some(settle) = first_settle(db, name) else {
        return;
    };
    if let Err(settle) = post_jobs::after_notification(ctx, settle) {
        timers::start(ctx, Duration::ZERO, settle);
    }
}

/// A queued key may have changed where no notification is running (a flush, `SWAPDB`,
/// a load, an overwrite seen before sleeping): its queue is settled from a timer.
pub fn key_changed(ctx: &Context, db: i32, name: &[u8]) {
    if let Some(settle) = first_settle(db, name) {
        timers::start(ctx, Duration::ZERO, settle);
    }
}

/// The settle of `name`'s queue, unless it has no queue or one is already on its way.
fn first_settle(db: i32, name: &[u8]) -> Option<Settle> {
    let id: KeyId = (db, name.to_vec());
    let first = with_registry(|r| {
        r.key_mut(&id).is_some_and(|waiting| {
            let first = !waiting.settle_scheduled;
            waiting.settle_scheduled = true;
            first
        })
    });
    first.then_some(Settle(id))
}

/// After a flush, `SWAPDB` or a load, any queued key may have changed: settle them all.
pub fn settle_all_queues(ctx: &Context) {
    let ids: Vec<KeyId> = with_registry(|r| r.keys());
    for (db, name) in ids {
        key_changed(ctx, db, &name);
    }
}

/// A command of ours moved a lease of the lock open as `key` (in the selected database):
/// its waiters' handoff timer must not fire later than the lock's next change by itself.
pub fn lease_changed(ctx: &Context, key: &LockKey) {
    if !anyone_waiting() {
        return;
    }
    let id: KeyId = (selected_db(ctx), key.name().as_slice().to_vec());
    if !has_waiters(&id) {
        return;
    }
    if let Some(at) = effects::next_lease_end(key, server_clock::now_ms()) {
        arm_expiry_check(ctx, &id, at);
    }
}

/// Settles a queue right after Redis announced a change to its key.
struct Settle(KeyId);

impl Settle {
    fn run(self, ctx: &Context) {
        with_registry(|r| {
            if let Some(waiting) = r.key_mut(&self.0) {
                waiting.settle_scheduled = false;
            }
        });
        settle(ctx, &self.0);
    }
}

impl Timer for Settle {
    const NAME: &'static str = "settling a queue";

    fn fire(self, ctx: &Context) {
        self.run(ctx);
    }
}

impl Job for Settle {
    const NAME: &'static str = "settling a queue";

    fn run(self, ctx: &Context) {
        Settle::run(self, ctx);
    }
}

/// Settles a queue when its holder's lease ends.
struct LeaseEnd {
    id: KeyId,
    fires_at: i64,
}

impl Timer for LeaseEnd {
    const NAME: &'static str = "a lease's end";

    fn fire(self, ctx: &Context) {
        let current = with_registry(|r| {
            r.key_mut(&self.id).is_some_and(|waiting| {
                let current = waiting
                    .expiry_check
                    .is_some_and(|check| check.fires_at == self.fires_at);
                if current {
                    waiting.expiry_check = None;
                }
                current
            })
        });
        if current {
            settle(ctx, &self.id);
        }
    }
}

/// Opens the key: Redis drops it if its (latest) lease has passed, and shared holders
/// whose own lease ended are dropped. Whatever room that made goes to the queue; if
/// waiters remain, the queue is looked at again when the lock next changes by itself. A
/// key without expiry (PERSIST, or another value set without one) is only handed off on
/// release or deletion, or at the waiters' own BLOCK timeouts.
fn settle(ctx: &Context, id: &KeyId) {
    if !has_waiters(id) {
        return;
    }
    match writes(ctx) {
        Writes::Allowed => {}
        Writes::Paused => {
            arm_expiry_check(
                ctx,
                id,
                server_clock::now_ms().saturating_add(PAUSED_RETRY_MS),
            );
            return;
        }
        Writes::Replica => return,
    }
    if !select_db(ctx, id.0) {
        return;
    }
    let name = RedisString::create_from_slice(ctx.ctx, &id.1);
    let mut key = LockKey::open(ctx, &name, true);
    // A failed drop leaves the ended holders counted as gone by every decision anyway.
    let _ = effects::drop_ended(ctx, &mut key, server_clock::now_ms());
    hand_off(ctx, &mut key);
}

/// Settles the queues of keys Redis changed where no context was at hand (a lock
/// overwritten by another value: its unlink callback has none).
/// In a cluster, a key gone with a slot this node lost (Redis 7.0 deletes such keys
/// without an event) is not handed to a waiter here: its waiters retry (`TRYAGAIN`).
pub(super) fn settle_changed(ctx: &Context) {
    for (db, name) in with_registry(|r| r.take_changed()) {
        if slot_served_elsewhere(ctx, &name) {
            key_moved(ctx, db, &name);
        } else {
            key_changed(ctx, db, &name);
        }
    }
}

/// Stops the expiry checks of queues that emptied: a check must not outlive its queue.
pub(super) fn stop_abandoned_checks(ctx: &Context) {
    for timer in with_registry(|r| r.take_abandoned_timers()) {
        drop(timers::stop::<LeaseEnd>(ctx, timer));
    }
}

/// Ensures a timer fires at `deadline_ms` (when the lease ends) for `id`, unless one
/// already fires earlier; an earlier one replaces (and stops) a later one, so a key
/// has at most one. Far deadlines are checked every `LONGEST_DELAY_MS`, which keeps
/// the delay inside Redis 7.0's timer arithmetic.
pub(super) fn arm_expiry_check(ctx: &Context, id: &KeyId, deadline_ms: i64) {
    let now = server_clock::now_ms();
    let fires_at = deadline_ms.min(now.saturating_add(timers::LONGEST_DELAY_MS));
    let earlier = with_registry(|r| {
        r.key_mut(id).is_some_and(|waiting| {
            waiting
                .expiry_check
                .is_none_or(|armed| fires_at < armed.fires_at)
        })
    });
    if !earlier {
        return;
    }
    let delay = u64::try_from(fires_at.saturating_sub(now)).unwrap_or(0);
    let check = LeaseEnd {
        id: id.clone(),
        fires_at,
    };
    let timer = timers::start(ctx, Duration::from_millis(delay), check);
    let superseded = with_registry(|r| {
        r.key_mut(id).and_then(|waiting| {
            waiting
                .expiry_check
                .replace(ExpiryCheck { fires_at, timer })
        })
    });
    if let Some(old) = superseded {
        drop(timers::stop::<LeaseEnd>(ctx, old.timer));
    }
}
