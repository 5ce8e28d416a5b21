//! What happens at each turn of a blocked `LOCK.ACQUIRE` (or `LOCK.ACQUIREALL`): the
//! reply (a grant, or nil when our `BLOCK` timer ended the wait), `CLIENT UNBLOCK`
//! (nil), a disconnect (also `CLIENT UNBLOCK … ERROR`), and freeing the grant, which
//! notices a grant that never reached its client and passes the lock on.

use std::time::Duration;

use redis_module::{Context, RedisError, RedisString, RedisValue};

use super::timers::PAUSED_RETRY_MS;
use super::{dequeue, hand_off, reply_settled, KeyId};
use crate::fault;
use crate::ffi::blocked::{self, BlockedClient, Waiting};
use crate::ffi::lock_key::LockKey;
use crate::ffi::reply;
use crate::ffi::server::{select_db, writes, Writes};
use crate::ffi::server_clock;
use crate::ffi::timers::{self, Timer};
use crate::keyspace::effects;
use crate::stats;

/// What a waiter is unblocked with, travelling to its reply callback.
pub(super) enum Delivery {
    /// It holds the lock now; `delivered` records whether the reply reached it.
    Granted {
        client_id: u64,
        key: KeyId,
        token: Vec<u8>,
        fence: u64,
        delivered: bool,
        /// Asked by `LOCK.ACQUIREALL`: answered `[token, [fence]]`.
        as_list: bool,
    },
    /// It holds every key it asked for now (`LOCK.ACQUIREALL`), in database `db`: each
    /// with its fence, and whether that holding is new (a renewed one is not given back
    /// if this reply never arrives).
    GrantedAll {
        client_id: u64,
        db: i32,
        token: Vec<u8>,
        grants: Vec<(Vec<u8>, u64, bool)>,
        delivered: bool,
    },
    /// Its token already holds the lock (granted to another wait of the same client):
    /// the same grant, which is not given back if this reply never arrives.
    Renewed {
        client_id: u64,
        token: Vec<u8>,
        fence: u64,
        as_list: bool,
    },
    /// The key moved to another node (`MIGRATE` during resharding): the client must
    /// retry there, as for any key of a slot being moved.
    Moved,
    /// Its turn came, but the holders' mode refuses it: this error reply (`WRONGMODE`).
    Refused(String),
    /// A run-once duplicate: the run it waited for stored its result (`LOCK.DONE`),
    /// answered `[nil, fence, result]`.
    Replayed { fence: u64, result: Vec<u8> },
}

/// A blocked `LOCK.ACQUIRE`.
pub(super) struct LockWaiting;

impl Waiting for LockWaiting {
    type Delivery = Delivery;
    const NAME: &'static str = "a blocked LOCK.ACQUIRE";

    fn reply(ctx: &Context, delivery: Option<&mut Delivery>) {
        match delivery {
            Some(Delivery::Granted {
                client_id,
                token,
                fence,
                delivered,
                as_list,
                ..
            }) => {
                fault::inject("reply", Some(token));
                grant_reply(ctx, token, *fence, *as_list);
                // Only now: a reply that failed half-way leaves the grant undelivered,
                // and freeing it gives the lock back.
                *delivered = true;
                reply_settled(*client_id);
            }
            Some(Delivery::GrantedAll {
                client_id,
                token,
                grants,
                delivered,
                ..
            }) => {
                fault::inject("reply", Some(token));
                let fences: Vec<u64> = grants.iter().map(|(_, fence, _)| *fence).collect();
                reply::grant_all(ctx, token, &fences);
                *delivered = true;
                reply_settled(*client_id);
            }
            Some(Delivery::Renewed {
                client_id,
                token,
                fence,
                as_list,
            }) => {
                grant_reply(ctx, token, *fence, *as_list);
                reply_settled(*client_id);
            }
            Some(Delivery::Moved) => {
                ctx.reply(Err(RedisError::Str(fencelock_core::error::MOVED)));
            }
            Some(Delivery::Refused(error)) => {
                ctx.reply(Err(RedisError::String(error.clone())));
            }
            Some(Delivery::Replayed { fence, result }) => {
                reply::replay(ctx, *fence, result);
            }
            None => {
                ctx.reply(Ok(RedisValue::Null));
            }
        }
    }

    fn client_unblocked(ctx: &Context, client: BlockedClient) {
        if dequeue(ctx, client) {
            stats::BLOCK_TIMEOUTS.bump();
            // Not blocked on keys: Redis frees the handle only once we unblock it.
            blocked::unblock::<LockWaiting>(client, None);
        }
        ctx.reply(Ok(RedisValue::Null));
    }

    fn disconnected(ctx: &Context, client: BlockedClient) {
        // A granted client was already unblocked; its undelivered grant is handled when
        // Redis frees the delivery.
        if dequeue(ctx, client) {
            blocked::unblock::<LockWaiting>(client, None);
        }
    }

    fn free(ctx: &Context, delivery: Delivery) {
        if let Delivery::Renewed { client_id, .. } = delivery {
            reply_settled(client_id);
            return;
        }
        if let Delivery::GrantedAll {
            client_id,
            db,
            token,
            grants,
            delivered,
        } = delivery
        {
            reply_settled(client_id);
            if !delivered {
                // Every new holding goes back; the renewed ones were held before.
                for (name, fence, _) in grants.into_iter().filter(|grant| grant.2) {
                    let give_back = GiveBack {
                        key: (db, name),
                        token: token.clone(),
                        fence,
                    };
                    timers::start(ctx, Duration::ZERO, give_back);
                }
            }
            return;
        }
        let Delivery::Granted {
            client_id,
            key,
            token,
            fence,
            delivered,
            ..
        } = delivery
        else {
            return;
        };
        reply_settled(client_id);
        if !delivered {
            // The client left between the handoff and its reply: give the lock back
            // from a timer, where a key can be opened (this context may have no client).
            let give_back = GiveBack { key, token, fence };
            timers::start(ctx, Duration::ZERO, give_back);
        }
    }
}

/// `[token, fence]`, or `[token, [fence]]` for a `LOCK.ACQUIREALL` of one key.
fn grant_reply(ctx: &Context, token: &[u8], fence: u64, as_list: bool) {
    if as_list {
        reply::grant_all(ctx, token, &[fence]);
    } else {
        reply::grant(ctx, token, fence);
    }
}

/// A grant that never reached its client, to be released.
struct GiveBack {
    key: KeyId,
    token: Vec<u8>,
    fence: u64,
}

impl Timer for GiveBack {
    const NAME: &'static str = "giving back an undelivered grant";

    fn fire(self, ctx: &Context) {
        match writes(ctx) {
            Writes::Allowed => {}
            Writes::Paused => {
                let retry = Duration::from_millis(PAUSED_RETRY_MS.unsigned_abs());
                timers::start(ctx, retry, self);
                return;
            }
            Writes::Replica => return,
        }
        let (db, name) = &self.key;
        if !select_db(ctx, *db) {
            return;
        }
        let name = RedisString::create_from_slice(ctx.ctx, name);
        let mut key = LockKey::open(ctx, &name, true);
        let now_ms = server_clock::now_ms();
        let still_held = matches!(key.lock(), Ok(Some(held))
            if held.fence_of(&self.token, now_ms) == Some(self.fence));
        if still_held && effects::release(ctx, &mut key, &self.token).is_ok() {
            hand_off(ctx, &mut key);
        }
    }
}
