//! One key opened through the module API, closed on drop, that tells Redis it changed
//! only when it did.
//!
//! Redis would otherwise treat every key a module opened for writing as modified when
//! it closes: a `LOCK.ACQUIRE` that finds the lock taken, or a `LOCK.RELEASE` with a
//! token that does not hold it, would abort every transaction `WATCH`ing the lock and
//! invalidate every client-side cached read of it — which `SET … NX` on a taken key
//! does not. The module turns that blanket signal off (`config::set_options`); the code
//! that changes the key through this handle says so (`note_changed`), and the handle
//! signals the key once, at that moment (in the database it was opened in).

use std::cell::Cell;
use std::ffi::c_void;

use fencelock_core::error::CommandError;
use redis_module::{raw, Context, RedisString};

pub struct OpenKey<'a> {
    ctx: *mut raw::RedisModuleCtx,
    name: &'a RedisString,
    key: *mut raw::RedisModuleKey,
    /// Already signalled as modified (a command may change the key several times).
    signalled: Cell<bool>,
}

impl<'a> OpenKey<'a> {
    /// Opens `name` for reading, or for reading and writing (null when a key opened only
    /// for reading does not exist). Opening for writing also makes Redis drop the key
    /// first if its expiry has passed.
    pub fn open(ctx: &Context, name: &'a RedisString, writable: bool) -> Self {
        let mode = if writable {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        Self {
            ctx: ctx.ctx,
            name,
            key: raw::open_key(ctx.ctx, name.inner, mode),
            signalled: Cell::new(false),
        }
    }

    /// The key's name.
    pub fn name(&self) -> &'a RedisString {
        self.name
    }

    /// The raw handle, null when the key is absent and was opened only for reading.
    pub fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key
    }

    pub fn is_null(&self) -> bool {
        self.key.is_null()
    }

    /// Whether there is no key: no handle, or a handle (opened for writing) on a key that
    /// does not exist. Redis 8.2's `RM_GetExpire` reads through a missing key's value
    /// and crashes, so expiry is only asked of a key that exists.
    pub fn is_missing(&self) -> bool {
        // SAFETY: an open key handle for the lifetime of `self`.
        self.key.is_null()
            || unsafe { api!(RedisModule_KeyType)(self.key) }
                == raw::REDISMODULE_KEYTYPE_EMPTY as i32
    }

    /// The key was just changed through this handle: `WATCH`ers and client-side caches
    /// of it hear of it (once per handle).
    pub fn note_changed(&self) {
        if self.signalled.replace(true) {
            return;
        }
        // SAFETY: the context this handle was opened with is live while the handle is;
        // its client's selected database is still the key's (nothing selects another
        // while a key is open).
        unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx, self.name.inner) };
    }

    /// The value if the key holds the module type `of`, `None` when it is empty,
    /// `WrongType` when it holds anything else.
    pub fn module_value(
        &self,
        of: *mut raw::RedisModuleType,
    ) -> Result<Option<*mut c_void>, CommandError> {
        if self.key.is_null() {
            return Ok(None);
        }
        // SAFETY: an open key handle for the lifetime of `self`.
        unsafe {
            let key_type = api!(RedisModule_KeyType)(self.key);
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as i32 {
                return Ok(None);
            }
            if key_type != raw::REDISMODULE_KEYTYPE_MODULE as i32
                || api!(RedisModule_ModuleTypeGetType)(self.key) != of
            {
                return Err(CommandError::WrongType);
            }
            let value = api!(RedisModule_ModuleTypeGetValue)(self.key);
            Ok((!value.is_null()).then_some(value))
        }
    }
}

impl Drop for OpenKey<'_> {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: closed exactly once, here.
            unsafe { api!(RedisModule_CloseKey)(self.key) };
        }
    }
}
