//! Access to one `fencemark` key: read the highest admitted fence, raise it.

use fencelock_core::error::CommandError;
use redis_module::{raw, Context, RedisString};

use super::mark_type::{fence_of, new_value, MARK_TYPE};
use super::open_key::OpenKey;

/// An open mark key, closed on drop.
pub struct MarkKey<'a> {
    key: OpenKey<'a>,
}

impl<'a> MarkKey<'a> {
    /// Opens `name` for reading, or for reading and writing.
    pub fn open(ctx: &Context, name: &'a RedisString, writable: bool) -> Self {
        Self {
            key: OpenKey::open(ctx, name, writable),
        }
    }

    /// The highest admitted fence, `None` when there is no mark yet, or `WrongType`.
    pub fn highest(&self) -> Result<Option<u64>, CommandError> {
        let value = self.key.module_value(*MARK_TYPE.raw_type.borrow())?;
        // SAFETY: values of this type are made by `new_value`.
        Ok(value.and_then(|value| unsafe { fence_of(value) }.map(|fence| *fence)))
    }

    /// Makes the mark hold `fence` (the caller checked it is not lower).
    pub fn raise(&self, fence: u64) -> Result<(), CommandError> {
        if self.key.is_null() {
            return Err(CommandError::WriteFailed);
        }
        if self.highest()?.is_some() {
            // SAFETY: a mark value of this key, changed in place.
            unsafe {
                if let Some(current) =
                    fence_of(api!(RedisModule_ModuleTypeGetValue)(self.key.raw()))
                {
                    *current = fence;
                }
            }
            self.key.note_changed();
            return Ok(());
        }
        let value = new_value(fence);
        // SAFETY: ownership of `value` passes to Redis, which frees it with the type's free.
        let stored = unsafe {
            api!(RedisModule_ModuleTypeSetValue)(
                self.key.raw(),
                *MARK_TYPE.raw_type.borrow(),
                value,
            )
        } == raw::REDISMODULE_OK as i32;
        if stored {
            self.key.note_changed();
            Ok(())
        } else {
            // SAFETY: Redis refused the value, so it is still ours to free.
            drop(unsafe { Box::from_raw(value.cast::<u64>()) });
            Err(CommandError::WriteFailed)
        }
    }
}
