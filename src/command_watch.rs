//! A command filter that sees every command's name just before it runs, for two
//! things the module cannot learn otherwise:
//!
//! - `MIGRATE` (cluster resharding): its deletion of a lock key on the source must not
//!   count as a release, as the lock is still held on the target. Redis announces it as
//!   a plain `del` event whose context does not name the command, so the filter records
//!   whether the running command is `MIGRATE`. (One queued in `MULTI` runs under `EXEC`
//!   and is not recognised.)
//! - `SYNC`/`PSYNC`: a replica is attaching, and from now on the replication stream
//!   has a reader (see `propagation`). The filter runs before Redis creates the
//!   replication backlog, so no effect is missed.
//! - `CLIENT UNBLOCK id` aimed at a waiter that was just handed the lock but not yet
//!   answered: Redis 7.0 would drop the grant and leave that client without any reply.
//!   The lock is already its own, so for it the command becomes a no-op (`0`, as for a
//!   client that is not blocked), with the id replaced by one no client has.
//! - The start of each command ends the note of an unlinked lock (`events`), so an
//!   overwrite is never taken for a later expiry.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{raw, Context};

static RUNNING_MIGRATE: AtomicBool = AtomicBool::new(false);

/// Whether the command being executed is `MIGRATE`.
pub fn running_migrate() -> bool {
    RUNNING_MIGRATE.load(Ordering::Relaxed)
}

/// Installs the filter; returns false if the server refused it.
pub fn watch(ctx: &Context) -> bool {
    api!(RedisModule_RegisterCommandFilter).is_some_and(|register| {
        // SAFETY: registered once during load with a callback that lives forever.
        !unsafe { register(ctx.ctx, Some(note_command), 0) }.is_null()
    })
}

/// Argument `position` of the filtered command, or empty when there is none.
///
/// # Safety
/// `filter` must be the context Redis passed to the filter; the slice lives as long as
/// the argument is not replaced.
unsafe fn filter_arg<'a>(
    filter: *mut raw::RedisModuleCommandFilterCtx,
    position: c_int,
) -> &'a [u8] {
    let (Some(arg), Some(bytes)) = (
        api!(RedisModule_CommandFilterArgGet),
        api!(RedisModule_StringPtrLen),
    ) else {
        return &[];
    };
    // SAFETY: Redis checks the position; a missing argument is NULL.
    let string = unsafe { arg(filter, position) };
    if string.is_null() {
        return &[];
    }
    let mut len = 0usize;
    // SAFETY: a live argument string.
    let ptr = unsafe { bytes(string, &mut len) };
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: Redis's buffer of `len` bytes, unchanged while the filter runs.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

unsafe extern "C" fn note_command(filter: *mut raw::RedisModuleCommandFilterCtx) {
    crate::events::forget_unlinked_lock();
    // SAFETY: the filter context Redis passed in.
    let name = unsafe { filter_arg(filter, 0) };
    RUNNING_MIGRATE.store(name.eq_ignore_ascii_case(b"migrate"), Ordering::Relaxed);
    if name.eq_ignore_ascii_case(b"psync") || name.eq_ignore_ascii_case(b"sync") {
        crate::propagation::replication_started();
    }
    if name.eq_ignore_ascii_case(b"client") {
        // SAFETY: as above.
        unsafe { spare_answered_waiter(filter) };
    }
}

/// `CLIENT UNBLOCK <id> …` aimed at a waiter whose grant is on its way: aim it at no one.
///
/// # Safety
/// `filter` must be the context Redis passed to the filter.
unsafe fn spare_answered_waiter(filter: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: the filter context Redis passed in.
    if !unsafe { filter_arg(filter, 1) }.eq_ignore_ascii_case(b"unblock") {
        return;
    }
    // SAFETY: as above.
    let id = unsafe { filter_arg(filter, 2) };
    let Some(id) = std::str::from_utf8(id)
        .ok()
        .and_then(|id| id.parse::<u64>().ok())
    else {
        return;
    };
    if !crate::blocking::reply_pending(id) {
        return;
    }
    let (Some(create), Some(replace)) = (
        api!(RedisModule_CreateString),
        api!(RedisModule_CommandFilterArgReplace),
    ) else {
        return;
    };
    const NO_CLIENT: &[u8] = b"-1";
    // SAFETY: a new string with no context (freed by Redis with the argument vector,
    // which takes ownership in ArgReplace).
    unsafe {
        let nobody = create(
            std::ptr::null_mut(),
            NO_CLIENT.as_ptr().cast(),
            NO_CLIENT.len(),
        );
        if !nobody.is_null() {
            replace(filter, 2, nobody);
        }
    }
}
