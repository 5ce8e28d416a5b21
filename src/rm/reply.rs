//! The `[token, fence]` reply of every grant, written straight to the client: this is
//! the hot path of `LOCK.ACQUIRE`, so no intermediate reply values are built.

use std::ffi::c_long;

use redis_module::Context;

/// Replies `[token, fence]` on `ctx` (a command or a blocked client's reply callback).
pub fn grant(ctx: &Context, token: &[u8], fence: u64) {
    let (array, buffer, integer) = (
        api!(RedisModule_ReplyWithArray),
        api!(RedisModule_ReplyWithStringBuffer),
        api!(RedisModule_ReplyWithLongLong),
    );
    // SAFETY: a two-element array followed by exactly two elements, on a live context.
    unsafe {
        array(ctx.ctx, 2 as c_long);
        buffer(ctx.ctx, token.as_ptr().cast(), token.len());
        integer(ctx.ctx, i64::try_from(fence).unwrap_or(i64::MAX));
    }
}

/// `[token, [fence1, …, fenceN]]`: the reply of a grant of several keys.
pub fn grant_all(ctx: &Context, token: &[u8], fences: &[u64]) {
    let (array, buffer, integer) = (
        api!(RedisModule_ReplyWithArray),
        api!(RedisModule_ReplyWithStringBuffer),
        api!(RedisModule_ReplyWithLongLong),
    );
    // SAFETY: a two-element array, the second an array of exactly `fences.len()`
    // integers, on a live context.
    unsafe {
        array(ctx.ctx, 2 as c_long);
        buffer(ctx.ctx, token.as_ptr().cast(), token.len());
        array(ctx.ctx, c_long::try_from(fences.len()).unwrap_or(0));
        for fence in fences {
            integer(ctx.ctx, i64::try_from(*fence).unwrap_or(i64::MAX));
        }
    }
}
