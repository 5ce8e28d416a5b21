//! Server-side waiting for `LOCK.ACQUIRE … BLOCK`: FIFO queues of blocked clients per
//! key (kept in the core's `Waiters`), and the handoff that makes the first waiter the
//! holder in the same step as the release, expiry or deletion that freed the lock.
//!
//! Waiters live only in module memory (not persisted, not replicated). Each is a Redis
//! blocked client; exactly one of these ends it:
//! - a handoff: we unblock it with the grant, the reply callback sends
//!   `[token, fence]`; if the client is gone before that, freeing the grant sees it
//!   undelivered and releases the lock to the next waiter;
//! - its BLOCK timeout, on a timer of ours (`block_timeouts`): we unblock it with
//!   nothing, and the reply callback answers nil;
//! - `CLIENT UNBLOCK id` (Redis's timeout callback answers nil);
//! - a disconnect or `CLIENT UNBLOCK id ERROR` (the disconnect callback).
//!
//! Between a handoff and its reply the client is still blocked as far as Redis knows;
//! `CLIENT UNBLOCK` in that window would make Redis 7.0 drop the grant unanswered, so the
//! command filter turns it into a no-op for such clients (`reply_pending`).
//!
//! Redis runs all of these on its main thread. The registry is never borrowed across a
//! call into Redis that could re-enter it (key writes raise keyspace events).

mod block_timeouts;
mod callbacks;
mod timers;

use std::cell::RefCell;

use fencelock_core::lock;
use fencelock_core::token;
use fencelock_core::waiters::{self, Waiters};
use redis_module::{Context, RedisString};

use crate::keyspace::{effects, events};
use crate::node_fence;
use crate::rm::blocked::{self, BlockedClient};
use crate::rm::clock;
use crate::rm::key::LockKey;
use crate::rm::server::{client_id, selected_db};
use crate::rm::timers::TimerId;
use crate::stats;
use block_timeouts::BlockTimeout;
use callbacks::{Delivery, LockWaiting};
use timers::{arm_expiry_check, stop_abandoned_checks};

pub use timers::{key_changed, lease_changed, settle_all_queues, settle_changed};

/// A lock key within one logical database.
pub(crate) type KeyId = (i32, Vec<u8>);

/// One blocked `LOCK.ACQUIRE`.
struct Waiter {
    /// The blocked connection's `CLIENT ID`.
    client_id: u64,
    ttl_ms: i64,
    token: Option<Vec<u8>>,
    /// The timer that ends the wait (`BLOCK` timeout), unless it waits forever.
    timeout_timer: Option<TimerId>,
}

impl waiters::Waiter for Waiter {
    fn token(&self) -> Option<&[u8]> {
        self.token.as_deref()
    }
}

type Registry = Waiters<KeyId, BlockedClient, Waiter, TimerId>;

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    REGISTRY.with(|registry| f(&mut registry.borrow_mut()))
}

/// Number of clients waiting for `key` in the selected database.
pub fn waiter_count(ctx: &Context, name: &[u8]) -> usize {
    let id = (selected_db(ctx), name.to_vec());
    with_registry(|r| r.count(&id))
}

/// Whether any client waits for any key: the fast path of every release and acquire.
pub fn anyone_waiting() -> bool {
    with_registry(|r| !r.is_empty())
}

/// Clients waiting across all keys.
pub fn total_waiters() -> usize {
    with_registry(|r| r.total())
}

/// Whether `waiter_count` would be above `limit` after one more.
pub fn queue_is_full(ctx: &Context, name: &[u8], limit: usize) -> bool {
    waiter_count(ctx, name) >= limit
}

/// Blocks the calling client in `key`'s queue. The caller replies nothing more.
pub fn enqueue(
    ctx: &Context,
    name: &[u8],
    ttl_ms: i64,
    token: Option<Vec<u8>>,
    timeout_ms: i64,
    holder_remaining_ms: Option<i64>,
) -> bool {
    let client_id = client_id(ctx);
    let Some(client) = blocked::block::<LockWaiting>(ctx) else {
        return false;
    };
    let id: KeyId = (selected_db(ctx), name.to_vec());
    let waiter = Waiter {
        client_id,
        ttl_ms,
        token,
        timeout_timer: None,
    };
    let ticket = with_registry(|r| r.enqueue(id.clone(), client, waiter));
    if timeout_ms > 0 {
        let ends_at_ms = clock::now_ms().saturating_add(timeout_ms);
        block_timeouts::arm(ctx, BlockTimeout::new(client, ticket, ends_at_ms));
    }
    if let Some(remaining) = holder_remaining_ms {
        arm_expiry_check(ctx, &id, clock::now_ms().saturating_add(remaining));
    }
    true
}

/// Called with the key open for writing and found free: if anyone waits for it, the
/// first live waiter becomes the holder now. Returns whether the lock was handed off.
pub fn hand_off(ctx: &Context, key: &LockKey, name: &RedisString) -> bool {
    if !anyone_waiting() {
        return false;
    }
    let id: KeyId = (selected_db(ctx), name.as_slice().to_vec());
    let Some((client, waiter)) = with_registry(|r| r.pop_first(&id)) else {
        return false;
    };
    block_timeouts::disarm(ctx, waiter.timeout_timer);
    let chosen_token = waiter.token.is_some();
    let token = waiter.token.unwrap_or_else(token::generate);
    let grant =
        node_fence::with_clock(|clock| lock::acquire(None, &token, clock, clock::now_micros()));
    let lock::Acquire::Granted { fence } = grant else {
        // No fence left to issue: answer nil rather than leave the waiter blocked.
        blocked::unblock::<LockWaiting>(client, None);
        stop_abandoned_checks(ctx);
        return false;
    };
    let deadline = clock::now_ms().saturating_add(waiter.ttl_ms);
    if effects::grant(ctx, key, name, &token, fence, deadline).is_err() {
        // The key could not take the grant: the waiter is answered nil rather than left
        // blocked on a lock it does not hold.
        blocked::unblock::<LockWaiting>(client, None);
        stop_abandoned_checks(ctx);
        return false;
    }
    events::notify(ctx, events::HANDOFF, name);
    stats::HANDOFFS.bump();
    // Same-token waits first: they renew the lease the grant below is sent with.
    let deadline = if chosen_token {
        answer_same_token(ctx, key, name, &id, &token, fence).unwrap_or(deadline)
    } else {
        deadline
    };
    with_registry(|r| r.reply_pending(waiter.client_id));
    let delivery = Delivery::Granted {
        client_id: waiter.client_id,
        key: id.clone(),
        token,
        fence,
        delivered: false,
    };
    blocked::unblock::<LockWaiting>(client, Some(delivery));
    stop_abandoned_checks(ctx);
    if has_waiters(&id) {
        arm_expiry_check(ctx, &id, deadline);
    }
    true
}

/// Other waiters that asked with the token just granted are the same client again (a
/// retry on a new connection): each gets the same grant, as a same-token acquire would,
/// and its lease restarts. Returns the lease's last deadline, if any was answered.
fn answer_same_token(
    ctx: &Context,
    key: &LockKey,
    name: &RedisString,
    id: &KeyId,
    token: &[u8],
    fence: u64,
) -> Option<i64> {
    let mut last_deadline = None;
    for (client, waiter) in with_registry(|r| r.take_same_token(id, token)) {
        block_timeouts::disarm(ctx, waiter.timeout_timer);
        let deadline = clock::now_ms().saturating_add(waiter.ttl_ms);
        if effects::extend(ctx, key, name, deadline).is_ok() {
            last_deadline = Some(deadline);
        }
        with_registry(|r| r.reply_pending(waiter.client_id));
        let renewed = Delivery::Renewed {
            client_id: waiter.client_id,
            token: token.to_vec(),
            fence,
        };
        blocked::unblock::<LockWaiting>(client, Some(renewed));
    }
    last_deadline
}

/// Redis changed `name` where no context was at hand (a lock key overwritten by another
/// value): its queue is settled at the next chance (`settle_changed`).
pub fn note_changed(db: i32, name: &[u8]) {
    if anyone_waiting() {
        with_registry(|r| r.note_changed((db, name.to_vec())));
    }
}

fn has_waiters(id: &KeyId) -> bool {
    with_registry(|r| r.count(id) > 0)
}

/// `name` moved to another node (`MIGRATE`): its lock is held there now, so nobody may
/// be handed it here. Every waiter is told to retry (`TRYAGAIN`).
pub fn key_moved(ctx: &Context, db: i32, name: &[u8]) {
    let id: KeyId = (db, name.to_vec());
    for (client, waiter) in with_registry(|r| r.remove_key(&id)) {
        block_timeouts::disarm(ctx, waiter.timeout_timer);
        blocked::unblock::<LockWaiting>(client, Some(Delivery::Moved));
    }
    stop_abandoned_checks(ctx);
}

/// Removes a still-queued waiter and stops its timeout timer; false when it was already
/// granted or gone.
fn dequeue(ctx: &Context, client: BlockedClient) -> bool {
    let Some(waiter) = with_registry(|r| r.take(client, None)) else {
        return false;
    };
    block_timeouts::disarm(ctx, waiter.timeout_timer);
    stop_abandoned_checks(ctx);
    true
}

/// Whether the client with this `CLIENT ID` was handed a lock that Redis has not yet
/// replied to (see the module docs: `CLIENT UNBLOCK` must not reach it).
pub fn reply_pending(client_id: u64) -> bool {
    with_registry(|r| r.is_reply_pending(client_id))
}

/// The grant's reply was sent, or will never be: the client is an ordinary one again.
fn reply_settled(client_id: u64) {
    with_registry(|r| r.reply_settled(client_id));
}
