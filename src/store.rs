//! Access to one lock key in the keyspace: open it, read the holding, write, expire,
//! delete. Thin and unsafe-contained: everything above it works with `Holding` values.

use redis_module::{raw, Context, RedisString};

use crate::data_type::LOCK_TYPE;
use crate::lock::Holding;

/// The key held some other Redis type: the command must answer WRONGTYPE.
#[derive(Debug, PartialEq, Eq)]
pub struct WrongType;

/// An open lock key, closed on drop. Redis gives no handle when a key opened only for
/// reading does not exist; that reads as a free lock.
pub struct LockKey {
    key: *mut raw::RedisModuleKey,
}

impl LockKey {
    /// Opens `name` for reading, or for reading and writing. Opening for write also makes
    /// Redis drop the key first if its lease (expiry) has passed.
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

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key
    }

    /// The current holding, `None` when the lock is free, or `WrongType`.
    pub fn holding(&self) -> Result<Option<&Holding>, WrongType> {
        if self.key.is_null() {
            return Ok(None);
        }
        // SAFETY: the key handle is open for the lifetime of `self`.
        unsafe {
            let key_type = api!(RedisModule_KeyType)
                .map_or(raw::REDISMODULE_KEYTYPE_EMPTY as i32, |f| f(self.raw()));
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as i32 {
                return Ok(None);
            }
            let (Some(get_type), Some(get_value)) = (
                api!(RedisModule_ModuleTypeGetType),
                api!(RedisModule_ModuleTypeGetValue),
            ) else {
                return Err(WrongType);
            };
            if key_type != raw::REDISMODULE_KEYTYPE_MODULE as i32
                || get_type(self.raw()) != *LOCK_TYPE.raw_type.borrow()
            {
                return Err(WrongType);
            }
            let value = get_value(self.raw()).cast::<u8>();
            // SAFETY: values of our type are always made by `Holding::into_raw`.
            Ok((!value.is_null()).then(|| Holding::from_raw(value)))
        }
    }

    /// Stores `holding` as the key's value (replacing any previous one) and sets the lease
    /// to end at `deadline_ms` (Unix milliseconds).
    pub fn store(&self, holding: Box<Holding>, deadline_ms: i64) -> bool {
        self.store_without_deadline(holding) && self.set_deadline(deadline_ms)
    }

    /// Stores `holding` with no expiry; the caller sets one right after.
    pub fn store_without_deadline(&self, holding: Box<Holding>) -> bool {
        let Some(set_value) = api!(RedisModule_ModuleTypeSetValue).filter(|_| !self.key.is_null())
        else {
            return false;
        };
        let value = Holding::into_raw(holding);
        // SAFETY: ownership of `value` passes to Redis, which frees it with our `free`.
        let stored = unsafe { set_value(self.raw(), *LOCK_TYPE.raw_type.borrow(), value.cast()) }
            == raw::REDISMODULE_OK as i32;
        if stored {
            crate::stats::LIVE_LOCKS.up();
        } else {
            // SAFETY: Redis refused the value, so it is still ours to free.
            unsafe { Holding::free_raw(value) };
        }
        stored
    }

    /// Moves the lease's end to `deadline_ms`, an absolute Unix time in milliseconds. A
    /// deadline in the past leaves the key already expired, for Redis to remove.
    pub fn set_deadline(&self, deadline_ms: i64) -> bool {
        if self.key.is_null() {
            return false;
        }
        // SAFETY: the key is open for writing.
        unsafe {
            if let Some(set_abs) = api!(RedisModule_SetAbsExpire) {
                return set_abs(self.raw(), deadline_ms) == raw::REDISMODULE_OK as i32;
            }
            // Before SetAbsExpire, Redis adds its own clock to a relative ttl. Retry until
            // the millisecond did not change around the call, so the stored deadline is the
            // one we replicate, not one a millisecond later.
            let (Some(set_relative), Some(now)) =
                (api!(RedisModule_SetExpire), api!(RedisModule_Milliseconds))
            else {
                return false;
            };
            loop {
                let before = now();
                let status = set_relative(self.raw(), deadline_ms.saturating_sub(before).max(1));
                if now() == before || status != raw::REDISMODULE_OK as i32 {
                    return status == raw::REDISMODULE_OK as i32;
                }
            }
        }
    }

    /// Milliseconds left on the lease, or `None` when the key has no expiry.
    pub fn remaining_ms(&self) -> Option<i64> {
        let get_expire = api!(RedisModule_GetExpire).filter(|_| !self.key.is_null())?;
        // SAFETY: the key handle is open.
        let remaining = unsafe { get_expire(self.raw()) };
        (remaining >= 0).then_some(remaining)
    }

    /// Deletes the key (the lock becomes free).
    pub fn delete(&self) -> bool {
        api!(RedisModule_DeleteKey)
            .filter(|_| !self.key.is_null())
            // SAFETY: the key is open for writing.
            .is_some_and(|delete| unsafe { delete(self.raw()) } == raw::REDISMODULE_OK as i32)
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if let Some(close) = api!(RedisModule_CloseKey).filter(|_| !self.key.is_null()) {
            // SAFETY: closed exactly once, here.
            unsafe { close(self.raw()) };
        }
    }
}

/// The server's wall clock in Unix milliseconds, the one Redis uses for expiry.
pub fn now_ms() -> i64 {
    // SAFETY: a plain clock read.
    api!(RedisModule_Milliseconds).map_or_else(system_ms, |now| unsafe { now() })
}

fn system_ms() -> i64 {
    i64::try_from(now_micros() / 1_000).unwrap_or(i64::MAX)
}

/// The wall clock in Unix microseconds, the fast-moving term of the fence clock.
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
        })
}
