//! The callbacks Redis calls for a blocked `LOCK.ACQUIRE`: the reply (a grant, or nil
//! when our `BLOCK` timer ended the wait), `CLIENT UNBLOCK` (Redis's timeout callback),
//! the disconnect (also `CLIENT UNBLOCK … ERROR`), and freeing the grant, which notices
//! a grant that never reached its client and passes it on.

use std::ffi::{c_int, c_void};
use std::time::Duration;

use redis_module::{raw, Context, RedisError, RedisString, RedisValue};

use super::{dequeue, hand_off, reply_settled, unblock, KeyId};
use crate::commands::{effects, reply};
use crate::server_state::{select_db, writes, Writes};
use crate::stats;
use crate::store::LockKey;

/// What a waiter is unblocked with, travelling to its reply callback.
pub(super) enum Delivery {
    /// It holds the lock now; `delivered` records whether the reply reached it.
    Granted {
        client_id: u64,
        key: KeyId,
        token: Vec<u8>,
        fence: u64,
        delivered: bool,
    },
    /// The key moved to another node (`MIGRATE` during resharding): the client must
    /// retry there, as for any key of a slot being moved.
    Moved,
}

/// The reply of a waiter whose key moved; cluster clients retry on `TRYAGAIN`.
const MOVED_REPLY: &str = "TRYAGAIN the lock moved to another node, retry the command";

pub(super) unsafe extern "C" fn reply_granted(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let delivery = api!(RedisModule_GetBlockedClientPrivateData)
        .map_or(std::ptr::null_mut(), |get| get(ctx))
        .cast::<Delivery>();
    match delivery.as_mut() {
        Some(Delivery::Granted {
            client_id,
            token,
            fence,
            delivered,
            ..
        }) => {
            *delivered = true;
            reply_settled(*client_id);
            reply::grant(&context, token, *fence);
            raw::REDISMODULE_OK as c_int
        }
        Some(Delivery::Moved) => context.reply(Err(RedisError::Str(MOVED_REPLY))) as c_int,
        None => context.reply(Ok(RedisValue::Null)) as c_int,
    }
}

pub(super) unsafe extern "C" fn reply_timed_out(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let client =
        api!(RedisModule_GetBlockedClientHandle).map_or(std::ptr::null_mut(), |get| get(ctx));
    if !client.is_null() && dequeue(&context, client) {
        stats::BLOCK_TIMEOUTS.bump();
        // Not blocked on keys: Redis frees the handle only once we unblock it.
        unblock(client, std::ptr::null_mut());
    }
    context.reply(Ok(RedisValue::Null)) as c_int
}

pub(super) unsafe extern "C" fn client_disconnected(
    ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) {
    // A granted client was already unblocked; its undelivered grant is handled when
    // Redis frees the delivery.
    if dequeue(&Context::new(ctx), client) {
        unblock(client, std::ptr::null_mut());
    }
}

pub(super) unsafe extern "C" fn free_delivery(
    ctx: *mut raw::RedisModuleCtx,
    privdata: *mut c_void,
) {
    if privdata.is_null() {
        return;
    }
    let delivery = Box::from_raw(privdata.cast::<Delivery>());
    if let Delivery::Granted { client_id, .. } = *delivery {
        reply_settled(client_id);
    }
    let Delivery::Granted {
        key,
        token,
        fence,
        delivered: false,
        ..
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
            let retry = Duration::from_millis(super::timers::PAUSED_RETRY_MS.unsigned_abs());
            ctx.create_timer(retry, release_undelivered, grant);
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
