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

use std::time::Duration;

use fencelock_core::fifo_queue::Ticket;
use redis_module::Context;

use super::callbacks::LockWaiting;
use super::with_registry;
use crate::durations;
use crate::ffi::blocked::{self, BlockedClient};
use crate::ffi::server_clock;
use crate::ffi::timers::{self, Timer, TimerId};
use crate::stats;

/// A waiter's `BLOCK` timeout.
pub(super) struct BlockTimeout {
    client: BlockedClient,
    ticket: Ticket,
    /// Unix ms at which the waiter's `BLOCK` timeout ends.
    ends_at_ms: i64,
}

impl BlockTimeout {
    pub(super) fn new(client: BlockedClient, ticket: Ticket, ends_at_ms: i64) -> Self {
        Self {
            client,
            ticket,
            ends_at_ms,
        }
    }
}

/// Starts the timer that ends a wait and records it with the waiter.
pub(super) fn arm(ctx: &Context, timeout: BlockTimeout) {
    let delay = timeout
        .ends_at_ms
        .saturating_sub(server_clock::now_ms())
        // `timers::start` caps the delay; a longer timeout fires early and re-arms.
        .max(0);
    let (client, ticket) = (timeout.client, timeout.ticket);
    let id = timers::start(ctx, Duration::from_millis(delay.unsigned_abs()), timeout);
    with_registry(|r| {
        if let Some(waiter) = r.get_mut(client, ticket) {
            waiter.timeout_timer = Some(id);
        }
    });
}

/// Stops the timer of a waiter that left the queue another way.
pub(super) fn disarm(ctx: &Context, timer: Option<TimerId>) {
    if let Some(id) = timer {
        let _ = timers::stop::<BlockTimeout>(ctx, id);
    }
}

impl Timer for BlockTimeout {
    const NAME: &'static str = "a BLOCK timeout";

    /// A still-queued waiter is answered nil; a long timeout not over yet re-arms.
    fn fire(self, ctx: &Context) {
        // Only a test build looks up the waiter's token (and copies it) here.
        #[cfg(feature = "panic-injection")]
        {
            let token = with_registry(|r| {
                r.get_mut(self.client, self.ticket)
                    .and_then(|waiter| waiter.wanted.token.clone())
            });
            crate::fault::inject("timer", token.as_deref());
        }
        if self.ends_at_ms > server_clock::now_ms() {
            if with_registry(|r| r.is_queued(self.client, self.ticket)) {
                arm(ctx, self);
            }
            return;
        }
        if let Some(taken) = with_registry(|r| r.take(self.client, Some(self.ticket))) {
            stats::BLOCK_TIMEOUTS.bump();
            // This timer is the one `wait_over` would stop.
            durations::wait_ended(server_clock::now_micros().saturating_sub(taken.waiter.since_us));
            // No delivery: the reply callback answers nil.
            blocked::unblock::<LockWaiting>(self.client, None);
            super::timers::stop_abandoned_checks(ctx);
            super::left_queues(ctx, taken.keys);
        }
    }
}
