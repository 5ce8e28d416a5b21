//! Access to one `fencemark` key: read the highest admitted fence, raise it.

use fencelock_core::error::CommandError;
use redis_module::{raw, Context, RedisString};

use super::mark_type::{fence_of, new_value, MARK_TYPE};

/// An open mark key, closed on drop.
pub struct MarkKey {
    key: *mut raw::RedisModuleKey,
}

impl MarkKey {
    /// Opens `name` for reading, or for reading and writing. Redis tells `WATCH`ers a
    /// key opened for writing changed, so a check that may change nothing reads first.
    pub fn open(ctx: &Context, name: &RedisString, writable: bool) -> Self {
        let mode = if writable {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        Self {
            key: raw::open_key(ctx.ctx, name.inner, mode),
        }
    }

    /// The highest admitted fence, `None` when there is no mark yet, or `WrongType`.
    pub fn highest(&self) -> Result<Option<u64>, CommandError> {
        if self.key.is_null() {
            return Ok(None);
        }
        // SAFETY: the key handle is open for the lifetime of `self`.
        unsafe {
            let key_type = api!(RedisModule_KeyType)(self.key);
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as i32 {
                return Ok(None);
            }
            if key_type != raw::REDISMODULE_KEYTYPE_MODULE as i32
                || api!(RedisModule_ModuleTypeGetType)(self.key) != *MARK_TYPE.raw_type.borrow()
            {
                return Err(CommandError::WrongType);
            }
            let value = api!(RedisModule_ModuleTypeGetValue)(self.key);
            Ok(fence_of(value).map(|fence| *fence))
        }
    }

    /// Makes the mark hold `fence` (the caller checked it is not lower).
    pub fn raise(&self, fence: u64) -> Result<(), CommandError> {
        if self.key.is_null() {
            return Err(CommandError::WriteFailed);
        }
        if self.highest()?.is_some() {
            // SAFETY: a mark value of this key, changed in place.
            unsafe {
                if let Some(current) = fence_of(api!(RedisModule_ModuleTypeGetValue)(self.key)) {
                    *current = fence;
                }
            }
            return Ok(());
        }
        let value = new_value(fence);
        // SAFETY: ownership of `value` passes to Redis, which frees it with the type's free.
        let stored = unsafe {
            api!(RedisModule_ModuleTypeSetValue)(self.key, *MARK_TYPE.raw_type.borrow(), value)
        } == raw::REDISMODULE_OK as i32;
        if stored {
            Ok(())
        } else {
            // SAFETY: Redis refused the value, so it is still ours to free.
            drop(unsafe { Box::from_raw(value.cast::<u64>()) });
            Err(CommandError::WriteFailed)
        }
    }
}

impl Drop for MarkKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: closed exactly once, here.
            unsafe { api!(RedisModule_CloseKey)(self.key) };
        }
    }
}
