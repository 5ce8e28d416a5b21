//! The `fencemark` data type: the highest fence `LOCK.FENCED` admitted for a resource.
//! A mark never expires by itself; it is saved, loaded, rewritten into the AOF (as
//! `LOCK.MARK key fence`, the effect form), digested, measured and freed like any
//! value. Every callback runs inside the guard where it can do more than free memory.
//!
//! RDB layout (encver 0): the fence as an unsigned.

use std::ffi::{c_int, c_void};
use std::os::raw::c_char;
use std::sync::OnceLock;

use fencelock_core::fence_clock::MAX_FENCE;
use redis_module::{native_types::RedisType, raw};

use super::data_type::{unlinked_key, NO_METHODS};
use super::{node_state_form, panic_guard};

const ENCODING_VERSION: i32 = 0;

pub static MARK_TYPE: RedisType = RedisType::new(
    "fencemark",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        unlink2: Some(unlink2),
        ..NO_METHODS
    },
);

/// Called with the database, name and fence of every mark Redis unlinks (deletion,
/// eviction, overwrite), before it announces why.
pub type MarkUnlinkObserver = fn(i32, &[u8], u64);

static UNLINK_OBSERVER: OnceLock<MarkUnlinkObserver> = OnceLock::new();

/// Sets the observer of unlinked marks (once, at load).
pub fn observe_unlinks(observer: MarkUnlinkObserver) {
    let _ = UNLINK_OBSERVER.set(observer);
}

/// A new mark value holding `fence`, owned by Redis once stored.
pub(super) fn new_value(fence: u64) -> *mut c_void {
    Box::into_raw(Box::new(fence)).cast()
}

/// The fence behind a value pointer of this type.
///
/// # Safety
/// `value` must be null or a value of this type.
pub(super) unsafe fn fence_of<'a>(value: *mut c_void) -> Option<&'a mut u64> {
    // SAFETY: values of this type are always made by `new_value`.
    unsafe { value.cast::<u64>().as_mut() }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return std::ptr::null_mut();
    }
    panic_guard::callback("RDB load of a mark", std::ptr::null_mut(), || {
        // SAFETY: the IO handle Redis passed in.
        let fence = unsafe { api!(RedisModule_LoadUnsigned)(rdb) };
        // SAFETY: as above.
        let failed = unsafe { api!(RedisModule_IsIOError)(rdb) } != 0;
        if failed || fence == 0 || fence > MAX_FENCE {
            return std::ptr::null_mut();
        }
        new_value(fence)
    })
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    if let Some(fence) = unsafe { fence_of(value) } {
        // SAFETY: the IO handle Redis passed in.
        unsafe { api!(RedisModule_SaveUnsigned)(rdb, *fence) };
    }
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a value of this type.
    let Some(fence) = (unsafe { fence_of(value) }) else {
        return;
    };
    panic_guard::callback("AOF rewrite of a mark", (), || {
        // Without the RDB preamble nothing else carries the node's state.
        node_state_form::rewrite_once(aof);
        let fence = fence.to_string();
        // SAFETY: the format "sb" matches a module string and a buffer with its length.
        unsafe {
            api!(RedisModule_EmitAOF)(
                aof,
                c"LOCK.MARK".as_ptr(),
                c"sb".as_ptr(),
                key,
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
            );
        }
    });
}

unsafe extern "C" fn mem_usage(_value: *const c_void) -> usize {
    std::mem::size_of::<u64>()
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    if let Some(fence) = unsafe { fence_of(value) } {
        // SAFETY: the digest Redis passed in.
        unsafe {
            api!(RedisModule_DigestAddLongLong)(md, i64::try_from(*fence).unwrap_or(i64::MAX));
            api!(RedisModule_DigestEndSequence)(md);
        }
    }
}

unsafe extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let Some(observer) = UNLINK_OBSERVER.get() else {
        return;
    };
    // SAFETY: Redis passes a value of this type.
    let Some(fence) = (unsafe { fence_of(value.cast_mut()) }).map(|fence| *fence) else {
        return;
    };
    // SAFETY: the key-operation context Redis passed to unlink2.
    if let Some((db, name)) = unsafe { unlinked_key(ctx) } {
        panic_guard::callback("unlink of a mark", (), || observer(db, name, fence));
    }
}

/// Frees a value; may run on the lazy-free thread.
unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: made by `new_value`, freed once by Redis.
        drop(unsafe { Box::from_raw(value.cast::<u64>()) });
    }
}
