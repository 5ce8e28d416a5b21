//! The `fencelock` module data type: how a held lock is saved, loaded, rewritten into
//! the AOF, digested, measured and freed, plus the fence clock's RDB aux field.
//!
//! RDB layout (encver 0): token as a string buffer, fence as an unsigned. Aux field
//! (before the keyspace): the node's last fence. Loading validates everything and, as
//! the module handles IO errors itself, a truncated or corrupt payload fails the load
//! instead of aborting the server.
//!
//! Every callback runs inside the guard. `free` may run on Redis's lazy-free thread: it
//! touches nothing but the value, the allocator and an atomic gauge.

use std::ffi::{c_int, c_void, CString};
use std::os::raw::c_char;
use std::sync::OnceLock;

use fencelock_core::holding::Holding;
use redis_module::{native_types::RedisType, raw};

use super::guard;
use crate::node_fence;
use crate::stats;

/// Bumped when the RDB layout changes; older encodings stay loadable.
const ENCODING_VERSION: i32 = 0;

/// A data type's callbacks, none set: each type fills in the ones it has.
pub(super) const NO_METHODS: raw::RedisModuleTypeMethods = raw::RedisModuleTypeMethods {
    version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
    rdb_load: None,
    rdb_save: None,
    aof_rewrite: None,
    mem_usage: None,
    digest: None,
    free: None,
    aux_load: None,
    aux_save: None,
    aux_save2: None,
    aux_save_triggers: 0,
    free_effort: None,
    unlink: None,
    copy: None,
    defrag: None,
    copy2: None,
    free_effort2: None,
    mem_usage2: None,
    unlink2: None,
};

pub static LOCK_TYPE: RedisType = RedisType::new(
    "fencelock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        unlink2: Some(unlink2),
        ..NO_METHODS
    },
);

/// Called with the name and database of every lock key Redis unlinks (deletion,
/// expiry, eviction, overwrite), before it announces why.
pub type UnlinkObserver = fn(i32, &[u8]);

static UNLINK_OBSERVER: OnceLock<UnlinkObserver> = OnceLock::new();

/// Sets the observer of unlinked lock keys (once, at load).
pub fn observe_unlinks(observer: UnlinkObserver) {
    let _ = UNLINK_OBSERVER.set(observer);
}

fn io_failed(rdb: *mut raw::RedisModuleIO) -> bool {
    // SAFETY: `rdb` is the IO handle Redis passed to the callback.
    unsafe { api!(RedisModule_IsIOError)(rdb) != 0 }
}

fn load_token(rdb: *mut raw::RedisModuleIO) -> Option<Box<[u8]>> {
    let mut len: usize = 0;
    // SAFETY: Redis returns a buffer of `len` bytes that we copy and then free.
    unsafe {
        let buffer = api!(RedisModule_LoadStringBuffer)(rdb, &mut len);
        if buffer.is_null() {
            return None;
        }
        let token: Box<[u8]> = std::slice::from_raw_parts(buffer.cast::<u8>(), len).into();
        api!(RedisModule_Free)(buffer.cast());
        Some(token)
    }
}

fn load_unsigned(rdb: *mut raw::RedisModuleIO) -> Option<u64> {
    // SAFETY: reads from the IO handle Redis passed in; checked for IO errors below.
    let value = unsafe { api!(RedisModule_LoadUnsigned)(rdb) };
    (!io_failed(rdb)).then_some(value)
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard::callback("RDB load", std::ptr::null_mut(), || {
        load_holding(rdb, encver)
    })
}

/// A holding read from an RDB (or `RESTORE` payload), validated; null fails the load.
fn load_holding(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return std::ptr::null_mut();
    }
    let Some(token) = load_token(rdb).filter(|_| !io_failed(rdb)) else {
        return std::ptr::null_mut();
    };
    let Some(fence) = load_unsigned(rdb) else {
        return std::ptr::null_mut();
    };
    let Some(holding) = Holding::from_persisted(&token, fence) else {
        return std::ptr::null_mut();
    };
    node_fence::observe(fence);
    stats::LIVE_LOCKS.up();
    Holding::into_raw(holding).cast()
}

/// The holding behind a value pointer Redis passes to a callback.
///
/// # Safety
/// `value` must be null or a value of this type.
unsafe fn holding<'a>(value: *const c_void) -> Option<&'a Holding> {
    // SAFETY: the caller passes a value of this type, made by `Holding::into_raw`.
    (!value.is_null()).then(|| unsafe { Holding::from_raw(value.cast()) })
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    let Some(holding) = (unsafe { holding(value) }) else {
        return;
    };
    guard::callback("RDB save", (), || {
        let token = holding.token();
        // SAFETY: the IO handle Redis passed in and a buffer with its length.
        unsafe {
            api!(RedisModule_SaveStringBuffer)(rdb, token.as_ptr().cast(), token.len());
            api!(RedisModule_SaveUnsigned)(rdb, holding.fence());
        }
    });
}

/// Rewrites a held lock as the same `LOCK.APPLY` the replication stream uses; Redis
/// appends the key's `PEXPIREAT` itself.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a value of this type.
    let Some(holding) = (unsafe { holding(value) }) else {
        return;
    };
    guard::callback("AOF rewrite", (), || {
        let fence = holding.fence().to_string();
        let token = holding.token();
        let (Ok(command), Ok(format)) = (CString::new("LOCK.APPLY"), CString::new("sbb")) else {
            return;
        };
        // SAFETY: the format "sbb" matches a module string and two buffers with lengths.
        unsafe {
            api!(RedisModule_EmitAOF)(
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
    });
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of this type.
    unsafe { holding(value) }.map_or(0, Holding::allocated_bytes)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    let Some(holding) = (unsafe { holding(value) }) else {
        return;
    };
    guard::callback("DEBUG DIGEST", (), || {
        let token = holding.token();
        // SAFETY: the digest Redis passed in and a buffer with its length.
        unsafe {
            api!(RedisModule_DigestAddStringBuffer)(
                md,
                token.as_ptr().cast_mut().cast(),
                token.len(),
            );
            api!(RedisModule_DigestAddLongLong)(
                md,
                i64::try_from(holding.fence()).unwrap_or(i64::MAX),
            );
            api!(RedisModule_DigestEndSequence)(md);
        }
    });
}

/// Frees a value; may run on the lazy-free thread (no guard: nothing here can panic,
/// and nothing but the value is touched).
unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        stats::LIVE_LOCKS.down();
        // SAFETY: a value of this type, freed once by Redis.
        unsafe { Holding::free_raw(value.cast()) };
    }
}

unsafe extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    let Some(observer) = UNLINK_OBSERVER.get() else {
        return;
    };
    // SAFETY: the key-operation context Redis passed to unlink2.
    let (name, db) = unsafe {
        (
            api!(RedisModule_GetKeyNameFromOptCtx)(ctx),
            api!(RedisModule_GetDbIdFromOptCtx)(ctx),
        )
    };
    if name.is_null() {
        return;
    }
    let mut len = 0usize;
    // SAFETY: a live key string for the call.
    let ptr = unsafe { api!(RedisModule_StringPtrLen)(name, &mut len) };
    if ptr.is_null() {
        return;
    }
    // SAFETY: `len` bytes owned by the key string for the call.
    let name = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    guard::callback("unlink", (), || observer(db, name));
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return;
    }
    // SAFETY: the IO handle Redis passed in.
    unsafe { api!(RedisModule_SaveUnsigned)(rdb, node_fence::last()) };
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
