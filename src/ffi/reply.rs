//! The `[token, fence]` reply of every grant (`[token, [fences]]` for several keys),
//! written straight to the client: this is the hot path of `LOCK.ACQUIRE`, so no
//! intermediate reply values are built.

use std::ffi::c_long;

use redis_module::Context;

/// Replies `[token, fence]` on `ctx` (a command or a blocked client's reply callback).
pub fn grant(ctx: &Context, token: &[u8], fence: u64) {
    token_then(ctx, token);
    fence_element(ctx, fence);
}

/// `[token, [fence1, …, fenceN]]`: the reply of a grant of several keys.
pub fn grant_all(ctx: &Context, token: &[u8], fences: &[u64]) {
    token_then(ctx, token);
    // SAFETY: an array of exactly `fences.len()` elements follows, on a live context.
    unsafe {
        api!(RedisModule_ReplyWithArray)(ctx.ctx, c_long::try_from(fences.len()).unwrap_or(0));
    }
    for fence in fences {
        fence_element(ctx, *fence);
    }
}

/// `[nil, fence, result]`: a run-once duplicate answered with the stored result.
pub fn replay(ctx: &Context, fence: u64, result: &[u8]) {
    // SAFETY: a three-element array, its elements written right after, on a live context.
    unsafe {
        api!(RedisModule_ReplyWithArray)(ctx.ctx, 3 as c_long);
        api!(RedisModule_ReplyWithNull)(ctx.ctx);
    }
    fence_element(ctx, fence);
    // SAFETY: the third element, a buffer with its length, on a live context.
    unsafe {
        api!(RedisModule_ReplyWithStringBuffer)(ctx.ctx, result.as_ptr().cast(), result.len());
    }
}

/// Opens the two-element reply and writes the token; the caller writes the second.
fn token_then(ctx: &Context, token: &[u8]) {
    // SAFETY: a two-element array, its first element here and its second written by
    // the caller right after, on a live context.
    unsafe {
        api!(RedisModule_ReplyWithArray)(ctx.ctx, 2 as c_long);
        api!(RedisModule_ReplyWithStringBuffer)(ctx.ctx, token.as_ptr().cast(), token.len());
    }
}

fn fence_element(ctx: &Context, fence: u64) {
    // SAFETY: one element of an array opened by the caller, on a live context.
    unsafe {
        api!(RedisModule_ReplyWithLongLong)(ctx.ctx, i64::try_from(fence).unwrap_or(i64::MAX))
    };
}
