//! Server-side waiting for `LOCK.ACQUIRE … BLOCK`: FIFO queues of blocked clients per
//! key, and the handoff that makes the first waiter the holder in the same step as the
//! release, expiry or deletion that freed the lock.
//!
//! Waiters live only in module memory (not persisted, not replicated). Each is a Redis
//! blocked client; exactly one of these ends it:
//! - a handoff: we `UnblockClient` it with the grant, the reply callback sends
//!   `[token, fence]`; if the client is gone before that, `free_privdata` sees the grant
//!   undelivered and releases the lock to the next waiter;
//! - its BLOCK timeout or `CLIENT UNBLOCK id` (the timeout callback answers nil);
//! - a disconnect or `CLIENT UNBLOCK id ERROR` (the disconnect callback).
//!
//! Redis runs all of these on its main thread. The registry is never borrowed across a
//! call into Redis that could re-enter it (key writes raise keyspace events).

mod callbacks;
mod timers;

use std::cell::RefCell;
use std::collections::HashMap;
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
use callbacks::{client_disconnected, free_delivery, reply_granted, reply_timed_out, Delivery};
use timers::arm_expiry_timer;

pub use timers::{all_keys_vacated, key_vacated};

/// A lock key within one logical database.
pub(crate) type KeyId = (i32, Vec<u8>);

/// One blocked `LOCK.ACQUIRE`.
struct Waiter {
    client: *mut raw::RedisModuleBlockedClient,
    ttl_ms: i64,
    token: Option<Vec<u8>>,
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
    // SAFETY: blocks the current client; Redis owns `client` until it is unblocked.
    let client = unsafe {
        block(
            ctx.ctx,
            Some(reply_granted),
            Some(reply_timed_out),
            Some(free_delivery),
            timeout_ms,
        )
    };
    if client.is_null() {
        return false;
    }
    // SAFETY: `client` was just returned by BlockClient.
    unsafe { on_disconnect(client, Some(client_disconnected)) };
    let id: KeyId = (selected_db(ctx), name.to_vec());
    with_registry(|r| {
        let ticket = r.next_ticket;
        r.next_ticket += 1;
        r.queued.insert(client as usize, (id.clone(), ticket));
        r.keys.entry(id.clone()).or_default().queue.push(
            ticket,
            Waiter {
                client,
                ttl_ms,
                token,
            },
        );
    });
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
    let delivery = Delivery::Granted {
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
pub fn key_moved(db: i32, name: &[u8]) {
    let id: KeyId = (db, name.to_vec());
    let clients: Vec<*mut raw::RedisModuleBlockedClient> = with_registry(|r| {
        let Some(mut waiting) = r.keys.remove(&id) else {
            return Vec::new();
        };
        let mut clients = Vec::new();
        while let Some((_, waiter)) = waiting.queue.pop_front() {
            r.queued.remove(&(waiter.client as usize));
            clients.push(waiter.client);
        }
        clients
    });
    for client in clients {
        unblock(client, Box::into_raw(Box::new(Delivery::Moved)).cast());
    }
}

/// Removes a still-queued waiter; false when it was already granted or gone.
pub(crate) fn dequeue(client: *mut raw::RedisModuleBlockedClient) -> bool {
    with_registry(|r| {
        let Some((id, ticket)) = r.queued.remove(&(client as usize)) else {
            return false;
        };
        if let Some(waiting) = r.keys.get_mut(&id) {
            waiting.queue.remove(ticket);
            if waiting.queue.is_empty() {
                r.keys.remove(&id);
            }
        }
        true
    })
}
