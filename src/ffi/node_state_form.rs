//! `LOCK.CLOCK last-fence mark-floor`, the effect form of the node's own state (the fence
//! clock's high-water mark and the floor of evicted marks), written to replicas when a
//! mark is evicted and into an AOF rewritten without the RDB preamble, where no aux
//! data carries them. Both values only ever rise, so replaying it twice is harmless.

use std::ffi::c_char;
use std::sync::atomic::{AtomicU32, Ordering};

use fencelock_core::digits::{digits, DIGITS};
use redis_module::{raw, Context};

use crate::node_fence;

/// The process that last wrote the node state into a rewrite: a rewrite runs in a
/// forked child, which writes it once, before its first lock or mark key.
static WRITTEN_BY: AtomicU32 = AtomicU32::new(0);

/// `$emit($target, "LOCK.CLOCK", "bb", last, floor)` with the state as it is now.
macro_rules! emit_node_state {
    ($emit:expr, $target:expr) => {{
        let (mut last_digits, mut floor_digits) = ([0u8; DIGITS], [0u8; DIGITS]);
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let last = digits(as_i64(node_fence::last()), &mut last_digits);
        let floor = digits(as_i64(node_fence::mark_floor()), &mut floor_digits);
        // SAFETY: the format "bb" matches two buffers, each with its length.
        unsafe {
            $emit(
                $target,
                c"LOCK.CLOCK".as_ptr(),
                c"bb".as_ptr(),
                last.as_ptr().cast::<c_char>(),
                last.len(),
                floor.as_ptr().cast::<c_char>(),
                floor.len(),
            )
        }
    }};
}

/// Propagates the node state to replicas and the AOF.
pub fn replicate(ctx: &Context) {
    let replicate = api!(RedisModule_Replicate);
    emit_node_state!(replicate, ctx.ctx);
}

/// Writes the node state into the rewrite `aof`, once per rewrite.
pub(super) fn rewrite_once(aof: *mut raw::RedisModuleIO) {
    let pid = std::process::id();
    if WRITTEN_BY.swap(pid, Ordering::Relaxed) != pid {
        let emit = api!(RedisModule_EmitAOF);
        emit_node_state!(emit, aof);
    }
}
