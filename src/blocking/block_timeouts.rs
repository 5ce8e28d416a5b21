//! `BLOCK` timeouts on the module's own timers instead of Redis's blocked-client timeout.
//!
//! Why: on Redis 7.0, when a waiter's timeout is processed in the same event-loop turn
//! as the handoff that already unblocked it (a lease ending together with the timeout, a
//! slow command in between), Redis skips the timeout reply *and* detaches the client
//! from its pending grant, so the client never gets any reply. A timer of ours either
//! finds the waiter still queued (and answers nil by unblocking it) or finds it already
//! granted (and does nothing): both outcomes go through one unblock, on every server.
//!
//! A timer carries its waiter's handle and ticket (tickets are never reused, handles
//! are), and is stopped when the waiter leaves the queue another way, so a long timeout
//! leaves no timer behind after an early grant.

use std::ffi::c_void;

use redis_module::{raw, Context};

use super::{timeout_elapsed, Ticket};
use crate::store;

/// Longest single timer; longer timeouts re-arm (Redis's timer arithmetic is in µs).
const MAX_TIMER_DELAY_MS: i64 = 24 * 60 * 60 * 1000;

/// What a timeout timer knows about its waiter.
pub(super) struct BlockTimer {
    pub(super) client: usize,
    pub(super) ticket: Ticket,
    /// Unix ms at which the waiter's `BLOCK` timeout ends.
    pub(super) ends_at_ms: i64,
}

/// Starts the timer that ends a wait at `timer.ends_at_ms`; returns its id.
pub(super) fn arm(ctx: &Context, timer: BlockTimer) -> Option<raw::RedisModuleTimerID> {
    let create = api!(RedisModule_CreateTimer)?;
    let delay = timer
        .ends_at_ms
        .saturating_sub(store::now_ms())
        .clamp(0, MAX_TIMER_DELAY_MS);
    let data = Box::into_raw(Box::new(timer));
    // SAFETY: Redis hands `data` back to `fired` exactly once, or to `disarm`'s caller
    // through StopTimer; either way it is turned back into the Box made here.
    Some(unsafe { create(ctx.ctx, delay, Some(fired), data.cast()) })
}

/// Stops a timer whose waiter left the queue another way, and frees what it carried.
pub(super) fn disarm(ctx: &Context, id: raw::RedisModuleTimerID) {
    let Some(stop) = api!(RedisModule_StopTimer) else {
        return;
    };
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: `id` came from `arm`; a timer that already fired is simply not found.
    let stopped = unsafe { stop(ctx.ctx, id, &mut data) } == raw::REDISMODULE_OK as i32;
    if stopped && !data.is_null() {
        // SAFETY: the timer was created by `arm` with a boxed BlockTimer.
        drop(unsafe { Box::from_raw(data.cast::<BlockTimer>()) });
    }
}

unsafe extern "C" fn fired(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: made by `arm`, given back by Redis once.
    let timer = *unsafe { Box::from_raw(data.cast::<BlockTimer>()) };
    timeout_elapsed(&Context::new(ctx), timer);
}
