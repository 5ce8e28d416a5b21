//! State only Redis's main thread touches, kept in a plain static instead of a
//! `thread_local!`.
//!
//! Why not `thread_local!`: in a shared object every access to one goes through
//! `__tls_get_addr` and a first-use check (30–70 instructions, measured with callgrind),
//! and a release touched five of them, about a quarter of what it costs beyond the floor
//! module. Redis calls a module's commands, callbacks, timers and events on its main
//! thread only (the module starts no thread of its own), so one copy is all there ever
//! was in use.
//!
//! Sound because it is checked: the thread that loaded the module is recorded at load
//! (`adopt_this_thread`), and an access from any other thread panics (the entry point's
//! guard turns that into an error or a log line) instead of sharing the value. The check
//! is `pthread_self`, one load from the thread pointer. A forked child (BGSAVE) runs on a
//! copy of the main thread, which `pthread_self` still names.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The `pthread_self` of the thread that loaded the module; 0 before the load.
static MAIN: AtomicUsize = AtomicUsize::new(0);

/// Records the calling thread (the one loading the module) as Redis's main thread.
pub fn adopt_this_thread() {
    MAIN.store(this_thread(), Relaxed);
}

fn this_thread() -> usize {
    // SAFETY: `pthread_self` has no preconditions and always succeeds.
    (unsafe { libc::pthread_self() }) as usize
}

/// A value made on first use by Redis's main thread and only ever lent to it. Hold a
/// `RefCell` or `Cell` in it for mutation, as in a `thread_local!`.
pub struct MainThread<T> {
    value: OnceCell<T>,
    make: fn() -> T,
}

// SAFETY: the value is only ever reached through `with`, which lends it to the main
// thread alone (checked on every call), so it is never shared between threads.
unsafe impl<T> Sync for MainThread<T> {}

impl<T> MainThread<T> {
    pub const fn new(make: fn() -> T) -> Self {
        Self {
            value: OnceCell::new(),
            make,
        }
    }

    /// Runs `f` with the value (made now if this is its first use).
    ///
    /// # Panics
    ///
    /// Off Redis's main thread, or before the module was loaded.
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        assert!(
            this_thread() == MAIN.load(Relaxed),
            "module state reached off Redis's main thread"
        );
        f(self.value.get_or_init(self.make))
    }
}
