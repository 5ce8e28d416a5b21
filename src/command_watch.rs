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
    if name.eq_ignore_ascii_case(b"psync") || name.eq_ignore_ascii_case(b"sync") {
        crate::propagation::replication_started();
    }
}
