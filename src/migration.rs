//! Knowing when a lock key leaves this node through `MIGRATE` (cluster resharding),
//! whose deletion on the source must not count as a release: the lock is still held,
//! on the target node.
//!
//! Redis announces the deletion as a plain `del` event from inside the command, and the
//! event callback's context does not name the command. A command filter sees every
//! command's name just before it runs, so it records whether the running one is
//! `MIGRATE`. (A `MIGRATE` queued in `MULTI` runs under `EXEC` and is not recognised.)

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

unsafe extern "C" fn note_command(filter: *mut raw::RedisModuleCommandFilterCtx) {
    let name = match (
        api!(RedisModule_CommandFilterArgGet),
        api!(RedisModule_StringPtrLen),
    ) {
        (Some(arg), Some(bytes)) => {
            let name = arg(filter, 0 as c_int);
            if name.is_null() {
                &[][..]
            } else {
                let mut len = 0usize;
                let ptr = bytes(name, &mut len);
                if ptr.is_null() {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                }
            }
        }
        _ => &[][..],
    };
    RUNNING_MIGRATE.store(name.eq_ignore_ascii_case(b"migrate"), Ordering::Relaxed);
}
