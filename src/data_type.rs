//! The `fencelock` module data type: how a held lock is saved, loaded, rewritten into
//! the AOF, digested, measured and freed, plus the fence clock's RDB aux field.
//!
//! RDB layout (encver 0): token as a string buffer, fence as an unsigned. Aux field
//! (before the keyspace): the node's last fence. Loading validates everything and, as
//! the module handles IO errors itself, a truncated or corrupt payload fails the load
//! instead of aborting the server.

use std::ffi::{c_int, c_void, CString};
use std::os::raw::c_char;

use redis_module::{native_types::RedisType, raw};

use crate::events;
use crate::fence::MAX_FENCE;
use crate::lock::Holding;
use crate::node_fence;

/// Bumped when the RDB layout changes; older encodings stay loadable.
const ENCODING_VERSION: i32 = 0;

pub static LOCK_TYPE: RedisType = RedisType::new(
    "fencelock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save2: None,
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: Some(unlink2),
    },
);

fn io_failed(rdb: *mut raw::RedisModuleIO) -> bool {
    // SAFETY: `rdb` is the IO handle Redis passed to the callback.
    api!(RedisModule_IsIOError).is_some_and(|is_error| unsafe { is_error(rdb) } != 0)
}

fn load_token(rdb: *mut raw::RedisModuleIO) -> Option<Box<[u8]>> {
    let load = api!(RedisModule_LoadStringBuffer)?;
    let free = api!(RedisModule_Free)?;
    let mut len: usize = 0;
    // SAFETY: Redis returns a buffer of `len` bytes that we copy and then free.
    unsafe {
        let buffer = load(rdb, &mut len);
        if buffer.is_null() {
            return None;
        }
        let token: Box<[u8]> = std::slice::from_raw_parts(buffer.cast::<u8>(), len).into();
        free(buffer.cast());
        Some(token)
    }
}

fn load_unsigned(rdb: *mut raw::RedisModuleIO) -> Option<u64> {
    let load = api!(RedisModule_LoadUnsigned)?;
    // SAFETY: reads from the IO handle Redis passed in; checked for IO errors below.
    let value = unsafe { load(rdb) };
    (!io_failed(rdb)).then_some(value)
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return std::ptr::null_mut();
    }
    let Some(token) = load_token(rdb).filter(|t| !io_failed(rdb) && !t.is_empty()) else {
        return std::ptr::null_mut();
    };
    let Some(fence) = load_unsigned(rdb).filter(|&fence| fence > 0 && fence <= MAX_FENCE) else {
        return std::ptr::null_mut();
    };
    // A token too long to hold is corrupt data: fail the load.
    let Some(holding) = Holding::pack(&token, fence) else {
        return std::ptr::null_mut();
    };
    node_fence::observe(fence);
    crate::stats::LIVE_LOCKS.up();
    Holding::into_raw(holding).cast()
}

/// The holding behind a value pointer Redis passes to a callback.
///
/// # Safety
/// `value` must be null or a value of this type.
unsafe fn holding<'a>(value: *const c_void) -> Option<&'a Holding> {
    (!value.is_null()).then(|| Holding::from_raw(value.cast()))
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let Some(holding) = holding(value) else {
        return;
    };
    if let (Some(save_buffer), Some(save_unsigned)) = (
        api!(RedisModule_SaveStringBuffer),
        api!(RedisModule_SaveUnsigned),
    ) {
        let token = holding.token();
        save_buffer(rdb, token.as_ptr().cast(), token.len());
        save_unsigned(rdb, holding.fence());
    }
}

/// Rewrites a held lock as the same `LOCK.APPLY` the replication stream uses; Redis
/// appends the key's `PEXPIREAT` itself.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let (Some(holding), Some(emit)) = (holding(value), api!(RedisModule_EmitAOF)) else {
        return;
    };
    let fence = holding.fence().to_string();
    let token = holding.token();
    let (Ok(command), Ok(format)) = (CString::new("LOCK.APPLY"), CString::new("sbb")) else {
        return;
    };
    emit(
        aof,
        command.as_ptr(),
        format.as_ptr(),
        key,
        token.as_ptr().cast::<c_char>(),
        token.len(),
        fence.as_ptr().cast::<c_char>(),
        fence.len(),
    );
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    holding(value).map_or(0, Holding::allocated_bytes)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let Some(holding) = holding(value) else {
        return;
    };
    if let (Some(add_buffer), Some(add_number), Some(end)) = (
        api!(RedisModule_DigestAddStringBuffer),
        api!(RedisModule_DigestAddLongLong),
        api!(RedisModule_DigestEndSequence),
    ) {
        let token = holding.token();
        add_buffer(md, token.as_ptr().cast_mut().cast(), token.len());
        add_number(md, i64::try_from(holding.fence()).unwrap_or(i64::MAX));
        end(md);
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        crate::stats::LIVE_LOCKS.down();
        Holding::free_raw(value.cast());
    }
}

unsafe extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    events::note_unlinked_lock(ctx);
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return;
    }
    if let Some(save_unsigned) = api!(RedisModule_SaveUnsigned) {
        save_unsigned(rdb, node_fence::last());
    }
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    if encver != ENCODING_VERSION || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return raw::REDISMODULE_ERR as c_int;
    }
    match load_unsigned(rdb) {
        Some(last_fence) => {
            node_fence::observe(last_fence);
            raw::REDISMODULE_OK as c_int
        }
        None => raw::REDISMODULE_ERR as c_int,
    }
}
