//! The timers of observers: each observer's `BLOCK` timeout, and per observed key one
//! recheck at the moment the key next changes by itself (an expiry, a lease end), which
//! no keyspace event announces in time or at all.

use std::time::Duration;

use redis_module::Context;

use super::callbacks::ObserverWaiting;
use super::{answer_key, remove, with_registry, KeyId};
use crate::ffi::blocked::{self, BlockedClient};
use crate::ffi::server_clock;
use crate::ffi::timers::{self, Timer, TimerId};

/// An observer's `BLOCK` timeout.
struct BlockEnd {
    id: KeyId,
    client: BlockedClient,
    number: u64,
    /// Unix ms at which the timeout ends.
    ends_at: i64,
}

/// Starts the timer that ends the wait of observer `number` and records it there.
pub(super) fn arm_timeout(
    ctx: &Context,
    id: &KeyId,
    client: BlockedClient,
    number: u64,
    ends_at: i64,
) {
    let delay = ends_at.saturating_sub(server_clock::now_ms()).max(0);
    let end = BlockEnd {
        id: id.clone(),
        client,
        number,
        ends_at,
    };
    // `timers::start` caps the delay; a longer timeout fires early and re-arms.
    let timer = timers::start(ctx, Duration::from_millis(delay.unsigned_abs()), end);
    with_registry(|r| {
        let observer = r
            .keys
            .get_mut(id)
            .and_then(|watched| watched.observers.get_mut(&number));
        if let Some(observer) = observer {
            observer.timeout = Some(timer);
        }
    });
}

/// Stops the timeout of an observer that was answered another way.
pub(super) fn disarm_timeout(ctx: &Context, timer: Option<TimerId>) {
    if let Some(timer) = timer {
        drop(timers::stop::<BlockEnd>(ctx, timer));
    }
}

impl Timer for BlockEnd {
    const NAME: &'static str = "an OBSERVE timeout";

    /// A still-waiting observer is answered nil; a long timeout not over yet re-arms.
    fn fire(self, ctx: &Context) {
        if self.ends_at > server_clock::now_ms() {
            let waiting = with_registry(|r| {
                r.clients
                    .get(&self.client)
                    .is_some_and(|(_, number)| *number == self.number)
            });
            if waiting {
                arm_timeout(ctx, &self.id, self.client, self.number, self.ends_at);
            }
            return;
        }
        if remove(ctx, self.client, Some(self.number)) {
            // No delivery: the reply callback answers nil.
            blocked::unblock::<ObserverWaiting>(self.client, None);
        }
    }
}

/// Looks at an observed key when it next changes by itself.
struct Recheck {
    id: KeyId,
    fires_at: i64,
}

/// Ensures the key `id` is looked at by `at` (Unix ms): a timer already due sooner
/// stays, a later one is replaced, so a key has at most one.
pub(super) fn arm_recheck(ctx: &Context, id: &KeyId, at: i64) {
    let now = server_clock::now_ms();
    let fires_at = at.min(now.saturating_add(timers::LONGEST_DELAY_MS));
    let sooner = with_registry(|r| {
        r.keys.get(id).is_some_and(|watched| {
            watched
                .recheck
                .is_none_or(|(_, armed_at)| fires_at < armed_at)
        })
    });
    if !sooner {
        return;
    }
    let delay = u64::try_from(fires_at.saturating_sub(now)).unwrap_or(0);
    let recheck = Recheck {
        id: id.clone(),
        fires_at,
    };
    let timer = timers::start(ctx, Duration::from_millis(delay), recheck);
    let replaced = with_registry(|r| {
        r.keys
            .get_mut(id)
            .and_then(|watched| watched.recheck.replace((timer, fires_at)))
    });
    if let Some((old, _)) = replaced {
        stop_recheck(ctx, old);
    }
}

pub(super) fn stop_recheck(ctx: &Context, timer: TimerId) {
    drop(timers::stop::<Recheck>(ctx, timer));
}

impl Timer for Recheck {
    const NAME: &'static str = "an observed key's next change";

    fn fire(self, ctx: &Context) {
        let current = with_registry(|r| {
            r.keys.get_mut(&self.id).is_some_and(|watched| {
                let current = watched.recheck.is_some_and(|(_, at)| at == self.fires_at);
                if current {
                    watched.recheck = None;
                }
                current
            })
        });
        if current {
            answer_key(ctx, &self.id);
        }
    }
}
