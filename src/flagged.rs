//! A registry borrowed out of its thread-local `RefCell` together with a plain static
//! flag that says whether it holds anything, set again each time the borrow ends (also
//! when a panic, caught by a command's guard, ends it).
//!
//! The blocking and observing registries each keep such a flag: every acquire, refresh
//! and release asks whether anyone waits or observes, the answer is nearly always no,
//! and a static answers it without the thread-local lookup (`__tls_get_addr` in a
//! shared object) and the borrow. Only Redis's main thread borrows the registries.

use std::cell::RefMut;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// A registry that can say whether it holds anything.
pub trait Occupied {
    fn occupied(&self) -> bool;
}

/// The borrowed registry; `flag` follows it when the borrow ends.
pub struct Flagged<'a, T: Occupied> {
    registry: RefMut<'a, T>,
    flag: &'static AtomicBool,
}

impl<'a, T: Occupied> Flagged<'a, T> {
    pub fn new(registry: RefMut<'a, T>, flag: &'static AtomicBool) -> Self {
        Self { registry, flag }
    }
}

impl<T: Occupied> Drop for Flagged<'_, T> {
    fn drop(&mut self) {
        self.flag.store(self.registry.occupied(), Relaxed);
    }
}

impl<T: Occupied> Deref for Flagged<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.registry
    }
}

impl<T: Occupied> DerefMut for Flagged<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.registry
    }
}
