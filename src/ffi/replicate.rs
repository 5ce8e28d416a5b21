//! Writing effects to replicas and the AOF. Each effect is one command with every
//! clock-dependent value spelled out. Arguments go straight into `RM_Replicate`'s
//! format string (numbers as ready-made digits), so Redis builds the propagated argv
//! once, with no intermediate module strings. `verbatim` propagates the running command
//! as it came.

use std::ffi::c_char;

use fencelock_core::digits::{digits, DIGITS};
use fencelock_core::holding::Extras;
use fencelock_core::mode::Mode;
use redis_module::{Context, RedisString};

use super::apply_form::ApplyForm;

/// `LOCK.APPLY key token fence PXAT deadline [SHARED | LIMIT n] [SESSION s] [LOCKDELAY
/// ms]`: a grant, or a shared holder's new deadline.
pub fn grant(
    ctx: &Context,
    key: &RedisString,
    token: &[u8],
    fence: u64,
    deadline_ms: i64,
    mode: Mode,
    extras: Extras,
) {
    if extras != Extras::default() {
        // Rarer, and variable in length: spelled as an argv (see `ApplyForm`).
        let form = ApplyForm::new(token, fence, Some(deadline_ms), mode, extras);
        ctx.replicate("LOCK.APPLY", form.args(key.as_slice()).as_slice());
        return;
    }
    let (mut fence_digits, mut deadline_digits) = ([0u8; DIGITS], [0u8; DIGITS]);
    let fence = digits(i64::try_from(fence).unwrap_or(i64::MAX), &mut fence_digits);
    let deadline = digits(deadline_ms, &mut deadline_digits);
    let replicate = api!(RedisModule_Replicate);
    emit_lock_apply!(
        replicate,
        ctx.ctx,
        key.inner,
        token,
        fence,
        Some(deadline),
        mode
    );
}

/// `LOCK.APPLY key token fence [SESSION s] [LOCKDELAY ms] [VALUE v]`: an exclusive
/// holding of a key without expiry (made permanent by hand), rewritten (a proclaim).
pub fn permanent_grant(ctx: &Context, key: &RedisString, token: &[u8], fence: u64, extras: Extras) {
    let form = ApplyForm::new(token, fence, None, Mode::Exclusive, extras);
    ctx.replicate("LOCK.APPLY", form.args(key.as_slice()).as_slice());
}

/// `LOCK.DROP key token`: one shared holder gone (released, or its lease ended).
pub fn drop_holder(ctx: &Context, key: &RedisString, token: &[u8]) {
    let replicate = api!(RedisModule_Replicate);
    // SAFETY: the format "sb" matches a module string and a buffer with its length.
    unsafe {
        replicate(
            ctx.ctx,
            c"LOCK.DROP".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            token.as_ptr().cast::<c_char>(),
            token.len(),
        );
    }
}

/// `PEXPIREAT key deadline`: a lease moved.
pub fn deadline(ctx: &Context, key: &RedisString, deadline_ms: i64) {
    let replicate = api!(RedisModule_Replicate);
    let mut deadline_digits = [0u8; DIGITS];
    let deadline = digits(deadline_ms, &mut deadline_digits);
    // SAFETY: the format "sb" matches a module string and a buffer with its length.
    unsafe {
        replicate(
            ctx.ctx,
            c"PEXPIREAT".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            deadline.as_ptr().cast::<c_char>(),
            deadline.len(),
        );
    }
}

/// `LOCK.MARK key fence`: a fence mark raised.
pub fn mark(ctx: &Context, key: &RedisString, fence: u64) {
    let replicate = api!(RedisModule_Replicate);
    let mut fence_digits = [0u8; DIGITS];
    let fence = digits(i64::try_from(fence).unwrap_or(i64::MAX), &mut fence_digits);
    // SAFETY: the format "sb" matches a module string and a buffer with its length.
    unsafe {
        replicate(
            ctx.ctx,
            c"LOCK.MARK".as_ptr(),
            c"sb".as_ptr(),
            key.inner,
            fence.as_ptr().cast::<c_char>(),
            fence.len(),
        );
    }
}

/// `DEL key`: a release.
pub fn delete(ctx: &Context, key: &RedisString) {
    let replicate = api!(RedisModule_Replicate);
    // SAFETY: the format "s" matches one module string.
    unsafe {
        replicate(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.inner);
    }
}

/// The running command itself, as the client sent it.
pub fn verbatim(ctx: &Context) {
    ctx.replicate_verbatim();
}
