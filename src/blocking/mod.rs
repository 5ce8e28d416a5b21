//! Server-side waiting for `LOCK.ACQUIRE … BLOCK`: FIFO queues of blocked clients per
//! key, and the handoff that makes the first waiter the holder in the same step as the
//! release, expiry or deletion that freed the lock.
//!
//! Waiters live only in module memory (not persisted, not replicated). Each is a Redis
//! blocked client; exactly one of these ends it:
//! - a handoff: we `UnblockClient` it with the grant, the reply callback sends
//!   `[token, fence]`; if the client is gone before that, `free_privdata` sees the grant
//!   undelivered and releases the lock to the next waiter;
//! - its BLOCK timeout, on a timer of ours (`block_timeouts`): we `UnblockClient` it
//!   with nothing, and the reply callback answers nil;
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
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;

use redis_module::{raw, Context, RedisString};

use crate::commands::effects;
use crate::events;
use crate::lock;
use crate::node_fence;
use crate::server_state::selected_db;
use crate::stats;
use crate::store::{self, LockKey};
use crate::token;
use crate::wait_queue::{Ticket, WaitQueue};
use block_timeouts::BlockTimer;
use callbacks::{client_disconnected, free_delivery, reply_granted, reply_timed_out, Delivery};
use timers::arm_expiry_timer;

pub use timers::{key_changed, lease_changed, settle_all_queues};

/// A lock key within one logical database.
pub(crate) type KeyId = (i32, Vec<u8>);

/// One blocked `LOCK.ACQUIRE`.
struct Waiter {
    client: *mut raw::RedisModuleBlockedClient,
    /// The blocked connection's `CLIENT ID`.
    client_id: u64,
    ttl_ms: i64,
    token: Option<Vec<u8>>,
    /// The timer that ends the wait (`BLOCK` timeout), unless it waits forever.
    timeout_timer: Option<raw::RedisModuleTimerID>,
}

#[derive(Default)]
pub(crate) struct KeyWaiters {
    queue: WaitQueue<Waiter>,
    /// The Unix ms at which the current expiry timer for this key fires. Timers that
    /// were superseded by an earlier one still fire, see a different time here, and
    /// do nothing.
    pub(crate) expiry_timer: Option<i64>,
    /// A deferred settle (after a deletion Redis announced) is already scheduled.
    pub(crate) settle_scheduled: bool,
}

#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) keys: HashMap<KeyId, KeyWaiters>,
    /// Queued (not yet granted) waiters by blocked-client handle.
    queued: HashMap<usize, (KeyId, Ticket)>,
    next_ticket: Ticket,
    /// `CLIENT ID`s of waiters handed the lock whose reply Redis has not sent yet.
    replies_pending: HashSet<u64>,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

pub(crate) fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    REGISTRY.with(|registry| f(&mut registry.borrow_mut()))
}

/// Number of clients waiting for `key` in the selected database.
pub fn waiter_count(ctx: &Context, name: &[u8]) -> usize {
    let id = (selected_db(ctx), name.to_vec());
    with_registry(|r| r.keys.get(&id).map_or(0, |k| k.queue.len()))
}

/// Whether any client waits for any key: the fast path of every release and acquire.
pub fn anyone_waiting() -> bool {
    with_registry(|r| !r.queued.is_empty())
}

/// Clients waiting across all keys.
pub fn total_waiters() -> usize {
    with_registry(|r| r.queued.len())
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
    let (Some(block), Some(on_disconnect)) = (
        api!(RedisModule_BlockClient),
        api!(RedisModule_SetDisconnectCallback),
    ) else {
        return false;
    };
    // SAFETY: a plain accessor on the calling client's context.
    let client_id = api!(RedisModule_GetClientId).map_or(0, |id| unsafe { id(ctx.ctx) });
    // Redis's own timeout stays off (0): the timeout runs on our timer. The timeout
    // callback is still given, as it is what `CLIENT UNBLOCK` calls.
    // SAFETY: blocks the current client; Redis owns `client` until it is unblocked.
    let client = unsafe {
        block(
            ctx.ctx,
            Some(reply_granted),
            Some(reply_timed_out),
            Some(free_delivery),
            0,
        )
    };
    if client.is_null() {
        return false;
    }
    // SAFETY: `client` was just returned by BlockClient.
    unsafe { on_disconnect(client, Some(client_disconnected)) };
    let id: KeyId = (selected_db(ctx), name.to_vec());
    let ticket = with_registry(|r| {
        let ticket = r.next_ticket;
        r.next_ticket += 1;
        r.queued.insert(client as usize, (id.clone(), ticket));
        r.keys.entry(id.clone()).or_default().queue.push(
            ticket,
            Waiter {
                client,
                client_id,
                ttl_ms,
                token,
                timeout_timer: None,
            },
        );
        ticket
    });
    if timeout_ms > 0 {
        let timer = BlockTimer {
            client: client as usize,
            ticket,
            ends_at_ms: store::now_ms().saturating_add(timeout_ms),
        };
        let armed = block_timeouts::arm(ctx, timer);
        with_registry(|r| {
            if let Some(waiter) = r.keys.get_mut(&id).and_then(|k| k.queue.get_mut(ticket)) {
                waiter.timeout_timer = armed;
            }
        });
    }
    if let Some(remaining) = holder_remaining_ms {
        arm_expiry_timer(ctx, &id, store::now_ms().saturating_add(remaining));
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
    let Some(waiter) = with_registry(|r| {
        let waiting = r.keys.get_mut(&id)?;
        let (_, waiter) = waiting.queue.pop_front()?;
        if waiting.queue.is_empty() {
            r.keys.remove(&id);
        }
        r.queued.remove(&(waiter.client as usize));
        Some(waiter)
    }) else {
        return false;
    };
    if let Some(timer) = waiter.timeout_timer {
        block_timeouts::disarm(ctx, timer);
    }
    let token = waiter.token.unwrap_or_else(token::generate);
    let grant =
        node_fence::with_clock(|clock| lock::acquire(None, &token, clock, store::now_micros()));
    let lock::Acquire::Granted { fence } = grant else {
        // No fence left to issue: answer nil rather than leave the waiter blocked.
        unblock(waiter.client, std::ptr::null_mut());
        return false;
    };
    let deadline = store::now_ms().saturating_add(waiter.ttl_ms);
    if effects::grant(ctx, key, name, &token, fence, deadline).is_err() {
        // The key could not take the grant: the waiter is answered nil rather than left
        // blocked on a lock it does not hold.
        unblock(waiter.client, std::ptr::null_mut());
        return false;
    }
    events::notify(ctx, events::HANDOFF, name);
    stats::HANDOFFS.bump();
    with_registry(|r| r.replies_pending.insert(waiter.client_id));
    let delivery = Delivery::Granted {
        client_id: waiter.client_id,
        key: id.clone(),
        token,
        fence,
        delivered: false,
    };
    unblock(waiter.client, Box::into_raw(Box::new(delivery)).cast());
    if has_waiters(&id) {
        arm_expiry_timer(ctx, &id, deadline);
    }
    true
}

pub(crate) fn has_waiters(id: &KeyId) -> bool {
    with_registry(|r| r.keys.contains_key(id))
}

pub(crate) fn unblock(client: *mut raw::RedisModuleBlockedClient, privdata: *mut c_void) {
    if let Some(unblock) = api!(RedisModule_UnblockClient) {
        // SAFETY: every blocked client reaches exactly one unblock: its registry entry
        // was removed before this call, so no other path can unblock it again.
        unsafe { unblock(client, privdata) };
    }
}

/// `name` moved to another node (`MIGRATE`): its lock is held there now, so nobody may
/// be handed it here. Every waiter is told to retry (`TRYAGAIN`).
pub fn key_moved(ctx: &Context, db: i32, name: &[u8]) {
    let id: KeyId = (db, name.to_vec());
    let waiters: Vec<Waiter> = with_registry(|r| {
        let Some(mut waiting) = r.keys.remove(&id) else {
            return Vec::new();
        };
        let mut waiters = Vec::new();
        while let Some((_, waiter)) = waiting.queue.pop_front() {
            r.queued.remove(&(waiter.client as usize));
            waiters.push(waiter);
        }
        waiters
    });
    for waiter in waiters {
        if let Some(timer) = waiter.timeout_timer {
            block_timeouts::disarm(ctx, timer);
        }
        unblock(
            waiter.client,
            Box::into_raw(Box::new(Delivery::Moved)).cast(),
        );
    }
}

/// Removes a still-queued waiter and stops its timeout timer; false when it was already
/// granted or gone.
pub(crate) fn dequeue(ctx: &Context, client: *mut raw::RedisModuleBlockedClient) -> bool {
    let Some(waiter) = take_queued(client as usize, None) else {
        return false;
    };
    if let Some(timer) = waiter.timeout_timer {
        block_timeouts::disarm(ctx, timer);
    }
    true
}

/// Takes a waiter out of the registry (with `ticket`: only that very wait).
fn take_queued(client: usize, ticket: Option<Ticket>) -> Option<Waiter> {
    with_registry(|r| {
        let (id, queued_ticket) = r.queued.get(&client)?.clone();
        if ticket.is_some_and(|ticket| ticket != queued_ticket) {
            return None;
        }
        r.queued.remove(&client);
        let waiting = r.keys.get_mut(&id)?;
        let waiter = waiting.queue.remove(queued_ticket);
        if waiting.queue.is_empty() {
            r.keys.remove(&id);
        }
        waiter
    })
}

/// A `BLOCK` timeout timer fired: a still-queued waiter is answered nil; a long timeout
/// that is not over yet re-arms.
fn timeout_elapsed(ctx: &Context, timer: BlockTimer) {
    if timer.ends_at_ms > store::now_ms() {
        let (client, ticket) = (timer.client, timer.ticket);
        let still_queued =
            with_registry(|r| r.queued.get(&client).is_some_and(|(_, t)| *t == ticket));
        if still_queued {
            let armed = block_timeouts::arm(ctx, timer);
            with_registry(|r| {
                if let Some((id, _)) = r.queued.get(&client).cloned() {
                    if let Some(waiter) = r.keys.get_mut(&id).and_then(|k| k.queue.get_mut(ticket))
                    {
                        waiter.timeout_timer = armed;
                    }
                }
            });
        }
        return;
    }
    if let Some(waiter) = take_queued(timer.client, Some(timer.ticket)) {
        stats::BLOCK_TIMEOUTS.bump();
        // No delivery: the reply callback answers nil.
        unblock(waiter.client, std::ptr::null_mut());
    }
}

/// Whether the client with this `CLIENT ID` was handed a lock that Redis has not yet
/// replied to (see the module docs: `CLIENT UNBLOCK` must not reach it).
pub fn reply_pending(client_id: u64) -> bool {
    with_registry(|r| r.replies_pending.contains(&client_id))
}

/// The grant's reply was sent, or will never be: the client is an ordinary one again.
fn reply_settled(client_id: u64) {
    with_registry(|r| r.replies_pending.remove(&client_id));
}
