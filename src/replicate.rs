//! Writing effects to replicas and the AOF. Each effect is one command with every
//! clock-dependent value spelled out. Arguments go straight into `RM_Replicate`'s
//! format string, so Redis builds the propagated argv once, with no intermediate
//! module strings.

use std::ffi::{c_char, c_longlong};

use redis_module::{Context, RedisString};

/// `LOCK.APPLY key token fence PXAT deadline`: a grant.
pub fn grant(ctx: &Context, key: &RedisString, token: &[u8], fence: u64, deadline_ms: i64) {
    let Some(replicate) = api!(RedisModule_Replicate) else {
        return;
    };
    // SAFETY: the format "sblcl" matches the arguments: a module string, a buffer with
    // its length, a long long, a C string and a long long.
    unsafe {
        replicate(
            ctx.ctx,
            c"LOCK.APPLY".as_ptr(),
            c"sblcl".as_ptr(),
            key.inner,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            as_long_long(fence),
            c"PXAT".as_ptr(),
            c_longlong::from(deadline_ms),
        );
    }
}

/// `PEXPIREAT key deadline`: a lease moved.
pub fn deadline(ctx: &Context, key: &RedisString, deadline_ms: i64) {
    let Some(replicate) = api!(RedisModule_Replicate) else {
        return;
    };
    // SAFETY: the format "sl" matches a module string and a long long.
    unsafe {
        replicate(
            ctx.ctx,
            c"PEXPIREAT".as_ptr(),
            c"sl".as_ptr(),
            key.inner,
            c_longlong::from(deadline_ms),
        );
    }
}

/// `DEL key`: a release.
pub fn delete(ctx: &Context, key: &RedisString) {
    let Some(replicate) = api!(RedisModule_Replicate) else {
        return;
    };
    // SAFETY: the format "s" matches one module string.
    unsafe {
        replicate(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.inner);
    }
}

/// Fences are issued below 2^63 (microseconds since 1970, or one above a parsed
/// `LOCK.APPLY` fence, itself an i64); saturate rather than wrap if one ever is not.
fn as_long_long(fence: u64) -> c_longlong {
    c_longlong::try_from(fence).unwrap_or(c_longlong::MAX)
}
