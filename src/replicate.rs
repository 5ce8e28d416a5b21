//! Writing effects to replicas and the AOF. Each effect is one command with every
//! clock-dependent value spelled out. Arguments go straight into `RM_Replicate`'s
//! format string (numbers as ready-made digits), so Redis builds the propagated argv
//! once, with no intermediate module strings.

use std::ffi::c_char;

use redis_module::{Context, RedisString};

/// `LOCK.APPLY key token fence PXAT deadline`: a grant.
pub fn grant(ctx: &Context, key: &RedisString, token: &[u8], fence: u64, deadline_ms: i64) {
    let Some(replicate) = api!(RedisModule_Replicate) else {
        return;
    };
    let (mut fence_digits, mut deadline_digits) = ([0u8; DIGITS], [0u8; DIGITS]);
    let fence = digits(i64::try_from(fence).unwrap_or(i64::MAX), &mut fence_digits);
    let deadline = digits(deadline_ms, &mut deadline_digits);
    // SAFETY: the format "sbbcb" matches the arguments: a module string, two buffers
    // with their lengths, a C string and a buffer with its length.
    unsafe {
        replicate(
            ctx.ctx,
            c"LOCK.APPLY".as_ptr(),
            c"sbbcb".as_ptr(),
            key.inner,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            fence.as_ptr().cast::<c_char>(),
            fence.len(),
            c"PXAT".as_ptr(),
            deadline.as_ptr().cast::<c_char>(),
            deadline.len(),
        );
    }
}

/// `PEXPIREAT key deadline`: a lease moved.
pub fn deadline(ctx: &Context, key: &RedisString, deadline_ms: i64) {
    let Some(replicate) = api!(RedisModule_Replicate) else {
        return;
    };
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

/// Room for any i64 in decimal, sign included.
const DIGITS: usize = 20;

/// Writes `n` in decimal into `buffer` and returns the digits: numbers go to Redis as
/// text, and formatting them here is cheaper than Redis's long-long conversion.
fn digits(n: i64, buffer: &mut [u8; DIGITS]) -> &[u8] {
    let mut magnitude = n.unsigned_abs();
    let mut len = 0;
    for slot in buffer.iter_mut().rev() {
        *slot = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        len += 1;
        if magnitude == 0 {
            break;
        }
    }
    if n < 0 {
        if let Some(slot) = buffer.iter_mut().rev().nth(len) {
            *slot = b'-';
            len += 1;
        }
    }
    buffer.get(DIGITS - len..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{digits, DIGITS};

    #[test]
    fn formats_like_display() {
        for n in [0, 7, -7, 10, 1_795_993_847_121_342, i64::MAX, i64::MIN] {
            let mut buffer = [0u8; DIGITS];
            assert_eq!(digits(n, &mut buffer), n.to_string().as_bytes());
        }
    }
}
