//! Access to one `fencemark` key: read the highest admitted fence, raise it.

use fencelock_core::error::CommandError;
use redis_module::{raw, Context, RedisString};

use super::key::{module_value, open_raw};
use super::mark_type::{fence_of, new_value, MARK_TYPE};

/// An open mark key, closed on drop.
pub struct MarkKey {
    key: *mut raw::RedisModuleKey,
}

impl MarkKey {
    /// Opens `name` for reading, or for reading and writing. Redis tells `WATCH`ers a
    /// key opened for writing changed, so a check that may change nothing reads first.
    pub fn open(ctx: &Context, name: &RedisString, writable: bool) -> Self {
        Self {
            key: open_raw(ctx, name, writable),
        }
    }

    /// The highest admitted fence, `None` when there is no mark yet, or `WrongType`.
    pub fn highest(&self) -> Result<Option<u64>, CommandError> {
        // SAFETY: the key handle is open (or null) for the lifetime of `self`; values of
        // this type are made by `new_value`.
        unsafe {
            let value = module_value(self.key, *MARK_TYPE.raw_type.borrow())?;
            Ok(value.and_then(|value| fence_of(value).map(|fence| *fence)))
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
