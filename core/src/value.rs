//! The value Redis keeps for a lock key: one thin pointer that is either a packed
//! exclusive `Holding` (as before shared holders existed, so an exclusive lock costs no
//! more than it did) or a `SharedHolders` set.
//!
//! The two are told apart by the first eight bytes behind the pointer: a holding starts
//! with its fence, which is never 0 (`Holding::pack` refuses it), and a shared set starts
//! with a tag that is always 0. A run-once record (`once`) starts with `ONCE_TAG`, above
//! every fence; it reads as its running holding's exclusive lock, or, done, as a
//! quarantine. This file and `holding` are the only `unsafe` in the
//! core; every function below states what its pointer must be.

use crate::holding::Holding;
pub use crate::lock_ref::LockRef;
use crate::once::{OnceRecord, ONCE_TAG};
use crate::shared::{SharedHolders, SHARED_TAG};

/// An owned lock value, before it is handed to Redis.
#[derive(Debug)]
pub enum LockValue {
    Exclusive(Box<Holding>),
    Shared(Box<SharedHolders>),
    Once(Box<OnceRecord>),
}

impl LockValue {
    /// Hands the value over as the thin pointer Redis stores.
    pub fn into_raw(self) -> *mut u8 {
        match self {
            LockValue::Exclusive(holding) => Holding::into_raw(holding),
            LockValue::Shared(set) => Box::into_raw(set).cast::<u8>(),
            LockValue::Once(record) => Box::into_raw(record).cast::<u8>(),
        }
    }

    /// Borrows the value behind a pointer made by `into_raw`.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` and not have been freed.
    pub unsafe fn from_raw<'a>(ptr: *const u8) -> LockRef<'a> {
        // SAFETY: the caller's contract; both layouts are at least eight bytes long.
        unsafe {
            if Self::is_once(ptr) {
                (*ptr.cast::<OnceRecord>()).as_lock()
            } else if Self::is_shared(ptr) {
                LockRef::Shared(&*ptr.cast::<SharedHolders>())
            } else {
                LockRef::Exclusive(Holding::from_raw(ptr))
            }
        }
    }

    /// The shared set behind a pointer made by `into_raw`, to change it in place; `None`
    /// for an exclusive holding.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw`, not have been freed, and not be borrowed elsewhere
    /// while the returned reference lives.
    pub unsafe fn shared_mut<'a>(ptr: *mut u8) -> Option<&'a mut SharedHolders> {
        // SAFETY: the caller's contract.
        unsafe { Self::is_shared(ptr).then(|| &mut *ptr.cast::<SharedHolders>()) }
    }

    /// The exclusive holding behind a pointer made by `into_raw`, to change it in place;
    /// `None` for a shared set.
    ///
    /// # Safety
    /// As `shared_mut`.
    pub unsafe fn exclusive_mut<'a>(ptr: *mut u8) -> Option<&'a mut Holding> {
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(record) = Self::once_mut(ptr) {
                return record.running_holding_mut();
            }
            (!Self::is_shared(ptr)).then(|| Holding::from_raw_mut(ptr))
        }
    }

    /// The run-once record behind a pointer made by `into_raw`; `None` for a lock.
    ///
    /// # Safety
    /// As `from_raw`.
    pub unsafe fn once<'a>(ptr: *const u8) -> Option<&'a OnceRecord> {
        // SAFETY: the caller's contract.
        unsafe { Self::is_once(ptr).then(|| &*ptr.cast::<OnceRecord>()) }
    }

    /// The run-once record behind a pointer made by `into_raw`, to change it in place.
    ///
    /// # Safety
    /// As `shared_mut`.
    pub unsafe fn once_mut<'a>(ptr: *mut u8) -> Option<&'a mut OnceRecord> {
        // SAFETY: the caller's contract.
        unsafe { Self::is_once(ptr).then(|| &mut *ptr.cast::<OnceRecord>()) }
    }

    /// Frees a value made by `into_raw`.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` and is invalid afterwards.
    pub unsafe fn free_raw(ptr: *mut u8) {
        // SAFETY: the caller's contract.
        unsafe {
            if Self::is_once(ptr) {
                drop(Box::from_raw(ptr.cast::<OnceRecord>()));
            } else if Self::is_shared(ptr) {
                drop(Box::from_raw(ptr.cast::<SharedHolders>()));
            } else {
                Holding::free_raw(ptr);
            }
        }
    }

    /// Whether the first eight bytes are the shared tag (read unaligned: a holding is a
    /// byte buffer).
    unsafe fn is_shared(ptr: *const u8) -> bool {
        // SAFETY: both layouts start with eight readable bytes.
        unsafe { std::ptr::read_unaligned(ptr.cast::<u64>()) == SHARED_TAG }
    }

    /// Whether the first eight bytes are the run-once tag.
    unsafe fn is_once(ptr: *const u8) -> bool {
        // SAFETY: every layout starts with eight readable bytes.
        unsafe { std::ptr::read_unaligned(ptr.cast::<u64>()) == ONCE_TAG }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::Mode;

    #[test]
    fn both_kinds_round_trip_through_one_pointer() {
        let exclusive = LockValue::Exclusive(Holding::pack(b"w", 5).unwrap()).into_raw();
        let mut set = SharedHolders::new(Mode::Semaphore(2));
        set.put(Holding::pack(b"r", 6).unwrap(), 100).unwrap();
        let shared = LockValue::Shared(set).into_raw();
        // SAFETY: both pointers come from `into_raw` and are freed once below.
        unsafe {
            assert_eq!(LockValue::from_raw(exclusive).mode(), Mode::Exclusive);
            assert_eq!(LockValue::from_raw(exclusive).fence_of(b"w", 0), Some(5));
            assert!(LockValue::shared_mut(exclusive).is_none());
            assert_eq!(LockValue::from_raw(shared).mode(), Mode::Semaphore(2));
            assert_eq!(LockValue::from_raw(shared).fence_of(b"r", 100), Some(6));
            assert_eq!(LockValue::from_raw(shared).fence_of(b"r", 101), None);
            let set = LockValue::shared_mut(shared).unwrap();
            set.put(Holding::pack(b"s", 7).unwrap(), 200).unwrap();
            assert_eq!(LockValue::from_raw(shared).visible_fence(150), Some(7));
            assert_eq!(LockValue::from_raw(shared).live_holders(150), 1);
            LockValue::free_raw(exclusive);
            LockValue::free_raw(shared);
        }
    }

    #[test]
    fn a_run_once_record_rides_the_same_pointer() {
        use crate::once::OnceRecord;
        let running = OnceRecord::running(Holding::pack(b"t", 5).unwrap(), 1_000, Some(b"fp"));
        let running = LockValue::Once(running).into_raw();
        let done = LockValue::Once(OnceRecord::done(6, 1_000, None, b"r").unwrap()).into_raw();
        // SAFETY: both pointers come from `into_raw` and are freed once below.
        unsafe {
            assert_eq!(LockValue::from_raw(running).fence_of(b"t", 0), Some(5));
            assert_eq!(
                LockValue::once(running).unwrap().fingerprint(),
                Some(&b"fp"[..])
            );
            LockValue::exclusive_mut(running).unwrap().set_lease_end(9);
            assert!(LockValue::shared_mut(running).is_none());
            assert!(LockValue::from_raw(done).is_quarantined());
            assert!(LockValue::exclusive_mut(done).is_none());
            assert_eq!(LockValue::once(done).unwrap().result(), Some(&b"r"[..]));
            let plain = LockValue::Exclusive(Holding::pack(b"p", 7).unwrap()).into_raw();
            assert!(LockValue::once(plain).is_none());
            LockValue::free_raw(plain);
            LockValue::free_raw(running);
            LockValue::free_raw(done);
        }
    }

    #[test]
    fn an_exclusive_holding_past_its_lease_is_quarantined_for_its_lock_delay() {
        let delayed = Holding::pack_with(
            b"w",
            5,
            crate::holding::Extras {
                session: None,
                lock_delay_ms: 1_000,
                value: None,
            },
        )
        .unwrap();
        let mut delayed = delayed;
        delayed.set_lease_end(2_000);
        let at = |now| LockRef::exclusive(&delayed, now);
        assert!(!at(2_000).is_quarantined());
        assert_eq!(at(2_000).fence_of(b"w", 2_000), Some(5));
        assert!(at(2_001).is_quarantined());
        assert_eq!(at(2_001).fence_of(b"w", 2_001), None);
        assert_eq!(at(2_001).visible_fence(2_001), None);
        assert_eq!(at(2_001).live_holders(2_001), 0);
        let plain = Holding::pack(b"w", 5).unwrap();
        assert!(!LockRef::exclusive(&plain, 9_999).is_quarantined());
    }
}
