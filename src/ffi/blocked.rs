//! Blocked clients: a client waiting inside a command until the module unblocks it. The
//! module's side is a type implementing `Waiting`; every callback Redis makes for a
//! blocked client runs inside the guard and reaches it with safe types.
//!
//! Redis's own timeout is never used (the module runs `BLOCK` timeouts on its own
//! timers, see `blocking::block_timeouts`); the timeout callback is still registered
//! because it is what `CLIENT UNBLOCK` calls.

use std::ffi::{c_int, c_void};

use redis_module::{raw, Context, RedisValue};

use super::panic_guard;

/// A blocked client's handle, valid until it is unblocked (and its reply sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockedClient(*mut raw::RedisModuleBlockedClient);

/// What the module does at each turn of a blocked client's life.
pub trait Waiting: 'static {
    /// What the module unblocks a client with, travelling to `reply` and `free`.
    type Delivery;
    const NAME: &'static str;
    /// The client was unblocked: send its reply (`delivery` is `None` when it was
    /// unblocked with nothing).
    fn reply(ctx: &Context, delivery: Option<&mut Self::Delivery>);
    /// `CLIENT UNBLOCK id [TIMEOUT]`: send its reply and `unblock` it.
    fn client_unblocked(ctx: &Context, client: BlockedClient);
    /// The client disconnected or got `CLIENT UNBLOCK id ERROR` while blocked.
    fn disconnected(ctx: &Context, client: BlockedClient);
    /// Redis is done with a delivery (replied, or the client left before its reply).
    fn free(ctx: &Context, delivery: Self::Delivery);
}

/// Blocks the calling client; `None` when the server refused.
pub fn block<W: Waiting>(ctx: &Context) -> Option<BlockedClient> {
    // SAFETY: blocks the current client with callbacks for `W`; timeout 0 (never).
    let client = unsafe {
        api!(RedisModule_BlockClient)(
            ctx.ctx,
            Some(reply::<W>),
            Some(client_unblocked::<W>),
            Some(free::<W>),
            0,
        )
    };
    if client.is_null() {
        return None;
    }
    // SAFETY: `client` was just returned by BlockClient.
    unsafe { api!(RedisModule_SetDisconnectCallback)(client, Some(disconnected::<W>)) };
    Some(BlockedClient(client))
}

/// Unblocks `client` with `delivery`. Each blocked client must be unblocked exactly
/// once: the caller has already removed it from every place that could do it again.
pub fn unblock<W: Waiting>(client: BlockedClient, delivery: Option<W::Delivery>) {
    let data = delivery.map_or(std::ptr::null_mut(), |d| Box::into_raw(Box::new(d)));
    // SAFETY: a live blocked client, unblocked once; `data` is freed by `free::<W>`.
    unsafe { api!(RedisModule_UnblockClient)(client.0, data.cast()) };
}

unsafe extern "C" fn reply<W: Waiting>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the reply callback's context carries the unblocking's private data.
    let delivery =
        unsafe { api!(RedisModule_GetBlockedClientPrivateData)(ctx) }.cast::<W::Delivery>();
    // SAFETY: made by `unblock::<W>` (or null), owned by Redis until `free::<W>`.
    let delivery = unsafe { delivery.as_mut() };
    let context = Context::new(ctx);
    // A panic while replying still answers the client (with the guard's error), so it
    // is never left without a reply.
    let replied = panic_guard::command(W::NAME, || {
        W::reply(&context, delivery);
        Ok(RedisValue::NoReply)
    });
    if replied.is_err() {
        context.reply(replied);
    }
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn client_unblocked<W: Waiting>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the timeout callback's context names its blocked client.
    let client = unsafe { api!(RedisModule_GetBlockedClientHandle)(ctx) };
    if !client.is_null() {
        let context = Context::new(ctx);
        panic_guard::callback(W::NAME, (), || {
            W::client_unblocked(&context, BlockedClient(client));
        });
    }
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn disconnected<W: Waiting>(
    ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) {
    panic_guard::callback(W::NAME, (), || {
        W::disconnected(&Context::new(ctx), BlockedClient(client));
    });
}

unsafe extern "C" fn free<W: Waiting>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: made by `unblock::<W>`; Redis frees each delivery once.
    let delivery = *unsafe { Box::from_raw(data.cast::<W::Delivery>()) };
    panic_guard::callback(W::NAME, (), || W::free(&Context::new(ctx), delivery));
}
