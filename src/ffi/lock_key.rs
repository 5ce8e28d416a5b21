//! Access to one lock key in the keyspace: open it, read its value (an exclusive
//! holding or a set of shared holders), write, change shared holders in place, expire,
//! delete. Everything above it works with the core's `LockValue`/`LockRef`.

use std::cell::Cell;
use std::ffi::c_void;

use fencelock_core::error::CommandError;
use fencelock_core::holding::Holding;
use fencelock_core::once::OnceRecord;
use fencelock_core::shared::SharedHolders;
use fencelock_core::value::{LockRef, LockValue};
use redis_module::{raw, Context, RedisString};

use super::data_type::LOCK_TYPE;
use super::open_key::OpenKey;

/// An open lock key, closed on drop. Redis gives no handle when a key opened only for
/// reading does not exist; that reads as a free lock.
pub struct LockKey<'a> {
    key: OpenKey<'a>,
    /// The value as last looked up through this handle (a command reads it several
    /// times); forgotten when this handle stores or deletes, the only changes to the key
    /// while it is open.
    value: Cell<Option<Result<Option<*mut c_void>, CommandError>>>,
}

impl<'a> LockKey<'a> {
    /// Opens `name` for reading, or for reading and writing. Opening for write also makes
    /// Redis drop the key first if its lease (expiry) has passed.
    pub fn open(ctx: &Context, name: &'a RedisString, writable: bool) -> Self {
        Self {
            key: OpenKey::open(ctx, name, writable),
            value: Cell::new(None),
        }
    }

    /// The lock's name (the key's).
    pub fn name(&self) -> &'a RedisString {
        self.key.name()
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key.raw()
    }

    #[inline]
    fn value_ptr(&self) -> Result<Option<*mut c_void>, CommandError> {
        if let Some(known) = self.value.get() {
            return known;
        }
        let value = self.key.module_value(*LOCK_TYPE.raw_type.borrow());
        self.value.set(Some(value));
        value
    }

    /// The lock, `None` when it is free, or `WrongType` when the key holds another type.
    /// An exclusive holding with a lock-delay whose lease ran out reads as
    /// `Quarantined` (its key lasts the delay longer than the lease).
    pub fn lock(&self) -> Result<Option<LockRef<'_>>, CommandError> {
        let Some(value) = self.value_ptr()? else {
            return Ok(None);
        };
        // SAFETY: values of our type are always made by `LockValue::into_raw`, and live
        // while the key is open and unchanged.
        let lock = unsafe { LockValue::from_raw(value.cast::<u8>()) };
        Ok(Some(match lock {
            LockRef::Exclusive(holding) if holding.lease_end_ms().is_some() => {
                LockRef::exclusive(holding, super::server_clock::command_ms())
            }
            lock => lock,
        }))
    }

    /// Now, to judge shared holders' own leases by. An exclusive lock's lease is its
    /// key's expiry, which Redis applied before the key was opened, so no clock is read
    /// for one (0: a time no lease is compared with).
    pub fn holders_clock_ms(&self) -> i64 {
        match self.lock() {
            Ok(Some(LockRef::Shared(_))) => super::server_clock::command_ms(),
            _ => 0,
        }
    }

    /// The run-once record at the key (`LOCK.ONCE`), if it holds one.
    pub fn once(&self) -> Option<&OnceRecord> {
        let value = self.value_ptr().ok().flatten()?;
        // SAFETY: a value of our type, live while the key is open and unchanged.
        unsafe { LockValue::once(value.cast::<u8>()) }
    }

    /// The exclusive holding, to change it in place (`None` when the lock is free, held
    /// shared, or the key holds another type).
    pub fn exclusive_mut(&mut self) -> Option<&mut Holding> {
        let value = self.value_ptr().ok().flatten()?;
        // SAFETY: a value of our type; `&mut self` keeps every other borrow of it out.
        unsafe { LockValue::exclusive_mut(value.cast::<u8>()) }
    }

    /// The shared holders, to change them in place (`None` when the lock is free, held
    /// exclusively, or the key holds another type). The caller keeps the key's expiry
    /// in step (`set_deadline`).
    pub fn shared_mut(&mut self) -> Option<&mut SharedHolders> {
        let value = self.value_ptr().ok().flatten()?;
        // SAFETY: a value of our type; `&mut self` keeps every other borrow of it out.
        unsafe { LockValue::shared_mut(value.cast::<u8>()) }
    }

    /// Stores `value` as the key's value (replacing any previous one) and sets the lease
    /// to end at `deadline_ms` (Unix milliseconds).
    pub fn store(&self, value: LockValue, deadline_ms: i64) -> bool {
        self.store_without_deadline(value) && self.set_deadline(deadline_ms)
    }

    /// Stores `value` with no expiry; the caller sets one right after.
    pub fn store_without_deadline(&self, value: LockValue) -> bool {
        if self.key.is_null() {
            return false;
        }
        self.value.set(None);
        let set_value = api!(RedisModule_ModuleTypeSetValue);
        let done = super::once_type::is_done_record(&value);
        let value = value.into_raw();
        // SAFETY: ownership of `value` passes to Redis, which frees it with our `free`.
        let stored = unsafe { set_value(self.raw(), *LOCK_TYPE.raw_type.borrow(), value.cast()) }
            == raw::REDISMODULE_OK as i32;
        if stored {
            self.key.note_changed();
            crate::stats::LIVE_LOCKS.up();
            if done {
                crate::stats::ONCE_DONE_RECORDS.up();
            }
        } else {
            // SAFETY: Redis refused the value, so it is still ours to free.
            unsafe { LockValue::free_raw(value) };
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
        let set = unsafe {
            api!(RedisModule_SetAbsExpire)(self.raw(), deadline_ms) == raw::REDISMODULE_OK as i32
        };
        if set {
            self.key.note_changed();
        }
        set
    }

    /// Milliseconds left on the lease, or `None` when the key has no expiry (or does
    /// not exist: see `OpenKey::is_missing`).
    pub fn remaining_ms(&self) -> Option<i64> {
        if self.key.is_missing() {
            return None;
        }
        // SAFETY: the key handle is open.
        let remaining = unsafe { api!(RedisModule_GetExpire)(self.raw()) };
        (remaining >= 0).then_some(remaining)
    }

    /// What is left of the lease (of the latest shared one): the key's expiry, unless a
    /// lock-delay makes the key outlast it. `None` without expiry.
    pub fn lease_remaining_ms(&self) -> Option<i64> {
        if !self.has_lock_delay() {
            return self.remaining_ms();
        }
        self.lease_deadline_ms()
            .map(|end| end.saturating_sub(super::server_clock::command_ms()).max(0))
    }

    /// When the lease (the latest shared one) ends (Unix ms), as `lease_remaining_ms`:
    /// with a lock-delay the holding's own, whatever the key's expiry was set to by hand.
    pub fn lease_deadline_ms(&self) -> Option<i64> {
        match self.lock() {
            Ok(Some(LockRef::Exclusive(holding) | LockRef::Quarantined(holding))) => {
                match holding.lease_end_ms() {
                    Some(end) if end != i64::MAX => Some(end),
                    _ => self.deadline_ms(),
                }
            }
            Ok(Some(LockRef::Shared(set))) if set.has_lock_delays() => set.latest_lease(),
            _ => self.deadline_ms(),
        }
    }

    /// Whether a holding here has a lock-delay (its key outlasts its lease).
    fn has_lock_delay(&self) -> bool {
        match self.lock() {
            Ok(Some(LockRef::Exclusive(holding) | LockRef::Quarantined(holding))) => {
                holding.lease_end_ms().is_some()
            }
            Ok(Some(LockRef::Shared(set))) => set.has_lock_delays(),
            _ => false,
        }
    }

    /// When the key expires (Unix ms), or `None` when it has no expiry.
    pub fn deadline_ms(&self) -> Option<i64> {
        if self.key.is_missing() {
            return None;
        }
        // SAFETY: the key handle is open.
        let deadline = unsafe { api!(RedisModule_GetAbsExpire)(self.raw()) };
        (deadline >= 0).then_some(deadline)
    }

    /// Replaces an exclusive lock's holding with `holding`, the key (and its expiry)
    /// staying as it is: no unlink, no new key. `false` (and `holding` dropped) when the
    /// key holds no lock.
    pub fn replace_exclusive(&mut self, holding: Box<Holding>) -> bool {
        if self.key.is_null() || self.exclusive_mut().is_none() {
            return false;
        }
        if let Some(value) = self.value_ptr().ok().flatten() {
            // SAFETY: a value of our type; `&mut self` keeps every other borrow out.
            if let Some(record) = unsafe { LockValue::once_mut(value.cast::<u8>()) } {
                // A running claim stays one: its holding changes inside the record.
                let replaced = record.replace_running(holding);
                if replaced {
                    self.key.note_changed();
                }
                return replaced;
            }
        }
        self.replace_value(LockValue::Exclusive(holding))
    }

    /// Replaces the key's lock value with `value`, the key (and its expiry) staying as
    /// it is: no unlink, no new key. `false` (and `value` dropped) when Redis refused.
    pub fn replace_value(&mut self, value: LockValue) -> bool {
        if self.key.is_null() {
            return false;
        }
        self.value.set(None);
        let new_done = super::once_type::is_done_record(&value);
        let new = value.into_raw();
        let mut old: *mut c_void = std::ptr::null_mut();
        // SAFETY: the key is open for writing and holds a value of our type; Redis
        // hands the old value back to us and keeps the new one.
        let replaced = unsafe {
            api!(RedisModule_ModuleTypeReplaceValue)(
                self.raw(),
                *LOCK_TYPE.raw_type.borrow(),
                new.cast(),
                &mut old,
            )
        } == raw::REDISMODULE_OK as i32;
        // SAFETY: whichever value Redis does not keep is ours to free, once: the old one
        // when it took the new, the new one when it refused.
        unsafe {
            if replaced {
                if new_done {
                    crate::stats::ONCE_DONE_RECORDS.up();
                }
                if !old.is_null() {
                    if super::once_type::is_done_record_raw(old.cast()) {
                        crate::stats::ONCE_DONE_RECORDS.down();
                    }
                    LockValue::free_raw(old.cast());
                }
            } else {
                LockValue::free_raw(new);
            }
        }
        if replaced {
            self.key.note_changed();
        }
        replaced
    }

    /// Deletes the key (the lock becomes free).
    pub fn delete(&self) -> bool {
        self.value.set(None);
        // SAFETY: the key is open for writing.
        let deleted = !self.key.is_null()
            && unsafe { api!(RedisModule_DeleteKey)(self.raw()) } == raw::REDISMODULE_OK as i32;
        if deleted {
            self.key.note_changed();
        }
        deleted
    }
}
