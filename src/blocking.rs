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

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::time::Duration;

use redis_module::{raw, Context, RedisString, RedisValue};

use crate::commands::effects;
use crate::events;
use crate::lock;
use crate::node_fence;
use crate::stats;
use crate::store::{self, LockKey};
use crate::token;
use crate::wait_queue::{Ticket, WaitQueue};

/// A lock key within one logical database.
type KeyId = (i32, Vec<u8>);

/// One blocked `LOCK.ACQUIRE`.
struct Waiter {
    client: *mut raw::RedisModuleBlockedClient,
    ttl_ms: i64,
    token: Option<Vec<u8>>,
}

#[derive(Default)]
struct KeyWaiters {
    queue: WaitQueue<Waiter>,
    /// The expiry timer in flight for this key and the Unix ms it fires at.
    expiry_timer: Option<(raw::RedisModuleTimerID, i64)>,
    /// A deferred settle (after a deletion Redis announced) is already scheduled.
    settle_scheduled: bool,
}

#[derive(Default)]
struct Registry {
    keys: HashMap<KeyId, KeyWaiters>,
    /// Queued (not yet granted) waiters by blocked-client handle.
    queued: HashMap<usize, (KeyId, Ticket)>,
    next_ticket: Ticket,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    REGISTRY.with(|registry| f(&mut registry.borrow_mut()))
}

/// The grant travelling from a handoff to the waiter's reply callback; `delivered`
/// records whether the reply reached the client.
struct Delivery {
    key: KeyId,
    token: Vec<u8>,
    fence: u64,
    delivered: bool,
}

/// How long to wait before retrying a handoff while Redis has writes (and with them
/// expiry) paused, e.g. during `FAILOVER` or `CLIENT PAUSE WRITE`.
const PAUSED_RETRY: Duration = Duration::from_millis(10);

/// The database the context's client has selected.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: plain accessor on a live context.
    api!(RedisModule_GetSelectedDb).map_or(0, |db| unsafe { db(ctx.ctx) })
}

fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: plain setter on a live context that has a client.
    api!(RedisModule_SelectDb)
        .is_some_and(|select| unsafe { select(ctx.ctx, db) } == raw::REDISMODULE_OK as c_int)
}

/// Whether a timer may write to the keyspace now.
#[derive(PartialEq, Eq)]
enum Writes {
    Allowed,
    /// Writes are paused (`FAILOVER`, `CLIENT PAUSE WRITE`): Redis then treats expired
    /// keys as absent without deleting them, so writing one would collide with the
    /// still-present key. Retry shortly.
    Paused,
    /// A replica's keyspace follows its primary; there is nothing to hand off here.
    Replica,
}

fn writes(ctx: &Context) -> Writes {
    // SAFETY: plain accessors on a live context.
    let flags = api!(RedisModule_GetContextFlags).map_or(0, |f| unsafe { f(ctx.ctx) });
    if flags & raw::REDISMODULE_CTX_FLAGS_SLAVE as c_int != 0 {
        return Writes::Replica;
    }
    // SAFETY: reads server state only.
    if api!(RedisModule_AvoidReplicaTraffic).is_some_and(|f| unsafe { f() } != 0) {
        return Writes::Paused;
    }
    Writes::Allowed
}

/// Clients may block unless they run inside MULTI, a script or a function, or a
/// context that forbids blocking; there BLOCK behaves as a plain acquire.
pub fn can_block(ctx: &Context) -> bool {
    // SAFETY: plain accessor on a live context.
    let flags = api!(RedisModule_GetContextFlags).map_or(0, |f| unsafe { f(ctx.ctx) });
    let forbidding = raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | raw::REDISMODULE_CTX_FLAGS_LOADING;
    flags & forbidding as c_int == 0
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
        return false;
    };
    let deadline = store::now_ms().saturating_add(waiter.ttl_ms);
    let delivery = Box::new(Delivery {
        key: id.clone(),
        token,
        fence,
        delivered: false,
    });
    if effects::grant(ctx, key, name, &delivery.token, fence, deadline).is_err() {
        // The key could not take the grant: the waiter is answered nil rather than left
        // blocked on a lock it does not hold.
        unblock(waiter.client, std::ptr::null_mut());
        return false;
    }
    events::notify(ctx, events::HANDOFF, name);
    stats::HANDOFFS.bump();
    unblock(waiter.client, Box::into_raw(delivery).cast());
    if has_waiters(&id) {
        arm_expiry_timer(ctx, &id, deadline);
    }
    true
}

fn has_waiters(id: &KeyId) -> bool {
    with_registry(|r| r.keys.contains_key(id))
}

fn unblock(client: *mut raw::RedisModuleBlockedClient, privdata: *mut c_void) {
    if let Some(unblock) = api!(RedisModule_UnblockClient) {
        // SAFETY: every blocked client reaches exactly one unblock: its registry entry
        // was removed before this call, so no other path can unblock it again.
        unsafe { unblock(client, privdata) };
    }
}

/// Redis announced that `name` disappeared (expired, deleted, renamed away, evicted).
/// Handing off inside that announcement would write under the feet of the command that
/// caused it, so the handoff runs from a timer right after; meanwhile every acquire
/// settles the queue first, so nobody overtakes the waiters.
pub fn key_vacated(ctx: &Context, db: i32, name: &[u8]) {
    let id: KeyId = (db, name.to_vec());
    let schedule = with_registry(|r| {
        r.keys.get_mut(&id).is_some_and(|waiting| {
            let first = !waiting.settle_scheduled;
            waiting.settle_scheduled = true;
            first
        })
    });
    if schedule {
        ctx.create_timer(Duration::ZERO, settle_timer, id);
    }
}

/// After a flush every queued key is free: settle them all.
pub fn all_keys_vacated(ctx: &Context) {
    let ids: Vec<KeyId> = with_registry(|r| r.keys.keys().cloned().collect());
    for (db, name) in ids {
        key_vacated(ctx, db, &name);
    }
}

fn settle_timer(ctx: &Context, id: KeyId) {
    if writes(ctx) == Writes::Paused && has_waiters(&id) {
        ctx.create_timer(PAUSED_RETRY, settle_timer, id);
        return;
    }
    with_registry(|r| {
        if let Some(waiting) = r.keys.get_mut(&id) {
            waiting.settle_scheduled = false;
        }
    });
    settle(ctx, &id);
}

fn expiry_timer(ctx: &Context, id: KeyId) {
    if writes(ctx) == Writes::Paused && has_waiters(&id) {
        ctx.create_timer(PAUSED_RETRY, expiry_timer, id);
        return;
    }
    with_registry(|r| {
        if let Some(waiting) = r.keys.get_mut(&id) {
            waiting.expiry_timer = None;
        }
    });
    settle(ctx, &id);
}

/// Opens the key: Redis drops it if its lease has passed. A free lock goes to the first
/// waiter; a held one gets an expiry timer for its current deadline.
fn settle(ctx: &Context, id: &KeyId) {
    if writes(ctx) != Writes::Allowed || !has_waiters(id) || !select_db(ctx, id.0) {
        return;
    }
    let name = RedisString::create_from_slice(ctx.ctx, &id.1);
    let key = LockKey::open(ctx, &name, true);
    match key.holding() {
        Ok(None) => {
            hand_off(ctx, &key, &name);
        }
        Ok(Some(_)) => {
            let remaining = key.remaining_ms().unwrap_or(i64::MAX / 2);
            arm_expiry_timer(ctx, id, store::now_ms().saturating_add(remaining));
        }
        // Another type took the name: waiters keep waiting for it to become a lock key
        // again (their BLOCK timeout still applies).
        Err(_) => {}
    }
}

/// Ensures a timer fires at `deadline_ms` (just after the lease ends) for `id`.
fn arm_expiry_timer(ctx: &Context, id: &KeyId, deadline_ms: i64) {
    let armed = with_registry(|r| r.keys.get(id).map(|waiting| waiting.expiry_timer));
    let Some(armed) = armed else {
        return;
    };
    if let Some((timer, fires_at)) = armed {
        if fires_at <= deadline_ms {
            return;
        }
        // SAFETY-free: stopping returns the timer's data (dropped) or an error if fired.
        let _ = ctx.stop_timer::<KeyId>(timer);
    }
    let delay = u64::try_from(deadline_ms.saturating_sub(store::now_ms())).unwrap_or(0);
    let timer = ctx.create_timer(Duration::from_millis(delay), expiry_timer, id.clone());
    with_registry(|r| {
        if let Some(waiting) = r.keys.get_mut(id) {
            waiting.expiry_timer = Some((timer, deadline_ms));
        }
    });
}

/// Removes a still-queued waiter; false when it was already granted or gone.
fn dequeue(client: *mut raw::RedisModuleBlockedClient) -> bool {
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

unsafe extern "C" fn reply_granted(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let delivery = api!(RedisModule_GetBlockedClientPrivateData)
        .map_or(std::ptr::null_mut(), |get| get(ctx))
        .cast::<Delivery>();
    let reply = match delivery.as_mut() {
        Some(delivery) => {
            delivery.delivered = true;
            grant_reply(&delivery.token, delivery.fence)
        }
        None => RedisValue::Null,
    };
    context.reply(Ok(reply)) as c_int
}

/// The `[token, fence]` reply of every grant.
pub fn grant_reply(token: &[u8], fence: u64) -> RedisValue {
    RedisValue::Array(vec![
        RedisValue::StringBuffer(token.to_vec()),
        RedisValue::Integer(i64::try_from(fence).unwrap_or(i64::MAX)),
    ])
}

unsafe extern "C" fn reply_timed_out(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let client =
        api!(RedisModule_GetBlockedClientHandle).map_or(std::ptr::null_mut(), |get| get(ctx));
    if !client.is_null() && dequeue(client) {
        stats::BLOCK_TIMEOUTS.bump();
        // Not blocked on keys: Redis frees the handle only once we unblock it.
        unblock(client, std::ptr::null_mut());
    }
    context.reply(Ok(RedisValue::Null)) as c_int
}

unsafe extern "C" fn client_disconnected(
    _ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) {
    // A granted client was already unblocked; its undelivered grant is handled when
    // Redis frees the delivery.
    if dequeue(client) {
        unblock(client, std::ptr::null_mut());
    }
}

unsafe extern "C" fn free_delivery(ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if privdata.is_null() {
        return;
    }
    let delivery = Box::from_raw(privdata.cast::<Delivery>());
    let Delivery {
        key,
        token,
        fence,
        delivered: false,
    } = *delivery
    else {
        return;
    };
    // The client left between the handoff and its reply: give the lock back from a
    // timer, where a key can be opened (this context may have no client).
    let undelivered = Undelivered { key, token, fence };
    Context::new(ctx).create_timer(Duration::ZERO, release_undelivered, undelivered);
}

/// A grant that never reached its client.
struct Undelivered {
    key: KeyId,
    token: Vec<u8>,
    fence: u64,
}

fn release_undelivered(ctx: &Context, grant: Undelivered) {
    match writes(ctx) {
        Writes::Allowed => {}
        Writes::Paused => {
            ctx.create_timer(PAUSED_RETRY, release_undelivered, grant);
            return;
        }
        Writes::Replica => return,
    }
    let (db, name) = &grant.key;
    if !select_db(ctx, *db) {
        return;
    }
    let name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &name, true);
    let still_held = matches!(key.holding(), Ok(Some(held))
        if held.fence() == grant.fence && held.is_token(&grant.token));
    if still_held && effects::release(ctx, &key, &name).is_ok() {
        hand_off(ctx, &key, &name);
    }
}
