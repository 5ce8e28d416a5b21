//! fencelock-floor: the floor rows of fencelock's benchmark. Test only, never shipped
//! (`publish = false`, in no package, no release artifact).
//!
//! The smallest module command that does the same key work as fencelock's lock
//! commands, and nothing else: the honest limit of what any module can reach on a
//! server. The benchmark runs `FLOOR.*` beside `LOCK.*` on the same server; the target
//! is fencelock ÷ floor ≥ 0.95×. Everything between fencelock and the floor is
//! fencelock's to remove; everything below the floor is the server's (command
//! dispatch, key lookup, expiry, the reply), which no module can remove.
//!
//! - `FLOOR.ACQUIRE key ttl-ms` → `[token, fence]`, or nil when the key exists;
//! - `FLOOR.RELEASE key token` → 1 (the key is deleted) or 0;
//! - `FLOOR.REFRESH key token ttl-ms` → 1 (the expiry is set to ttl-ms) or 0.
//!
//! Same work per command as fencelock (see `commands` and `value` for each choice):
//! the key opened for writing, one module value of the same bytes in the same
//! allocator size class (`MEMORY USAGE` is the same), the key's expiry, a token from the
//! same CSPRNG, a fence from the same hybrid clock, the same reply shape, the key
//! signalled as modified only when it changed (as fencelock, which turns Redis's
//! implicit signal off), and the command propagated verbatim — which is exactly what
//! fencelock does while nothing reads the replication stream (no AOF, no replica, no
//! backlog: the benchmark's setting, and Redis drops it there anyway). Verbatim
//! propagation is *not* correct with a replica or an AOF (a replica would draw its own
//! token and fence): never run the floor with either. What fencelock does beyond the
//! key work (waiters, shared holders, keyspace events, counters, the OOM check, the
//! effects it switches to once a replica appears) is deliberately absent.
//!
//! Files: `lib.rs` (registration and the raw API), `commands.rs` (the three
//! commands), `value.rs` (the `floorlock` value, its data type callbacks, the fence
//! clock).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

/// The Redis API function `$name`. Present by the check at load (`first_missing`);
/// were it not, the call panics, which a command's guard turns into an error reply.
macro_rules! api {
    ($name:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: written once while the module loads, only read afterwards.
        let function = unsafe { redis_module::raw::$name };
        match function {
            Some(function) => function,
            None => $crate::absent(stringify!($name)),
        }
    }};
}

mod commands;
mod value;

use std::ffi::{c_int, CStr};

use redis_module::{raw, redis_module, Context, RedisString, Status};

use crate::value::FLOOR_TYPE;

/// Every function the module calls through `api!`, checked once at load.
macro_rules! required {
    ($($name:ident),* $(,)?) => {
        // SAFETY: each static is written once while the module loads, read here after.
        [$((stringify!($name), unsafe { redis_module::raw::$name }.is_some())),*]
    };
}

fn first_missing() -> Option<&'static str> {
    let present = required![
        RedisModule_CloseKey,
        RedisModule_CreateCommand,
        RedisModule_DeleteKey,
        RedisModule_Free,
        RedisModule_IsIOError,
        RedisModule_KeyType,
        RedisModule_LoadStringBuffer,
        RedisModule_LoadUnsigned,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_OpenKey,
        RedisModule_ReplicateVerbatim,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithError,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithNull,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_SaveStringBuffer,
        RedisModule_SaveUnsigned,
        RedisModule_SetExpire,
        RedisModule_SetModuleOptions,
        RedisModule_SignalModifiedKey,
        RedisModule_StringPtrLen,
        RedisModule_StringToLongLong,
        RedisModule_WrongArity,
    ];
    present
        .into_iter()
        .find(|(_, present)| !present)
        .map(|(name, _)| name)
}

/// Reached only if a function passed the load check and then vanished.
#[cold]
fn absent(name: &str) -> ! {
    panic!("Redis module API function {name} is missing")
}

/// The commands: write, fast, key at position 1 (first = last = step = 1), as
/// fencelock's. Registered with `RM_CreateCommand` directly: the crate's generic
/// wrapper copies every argument into a new string per call, which fencelock avoids.
const COMMANDS: [(&CStr, raw::RedisModuleCmdFunc); 3] = [
    (c"floor.acquire", Some(commands::acquire)),
    (c"floor.release", Some(commands::release)),
    (c"floor.refresh", Some(commands::refresh)),
];

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Some(name) = first_missing() {
        ctx.log_warning(&format!(
            "fencelock-floor: this server lacks {name}; not loaded"
        ));
        return Status::Err;
    }
    // As fencelock: it handles RDB read errors itself, and signals changed keys itself.
    let options = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED;
    // SAFETY: a plain option setter on the load context.
    unsafe { api!(RedisModule_SetModuleOptions)(ctx.ctx, options as c_int) };
    for (name, entry) in COMMANDS {
        // SAFETY: static C strings and entry points, during load.
        let created = unsafe {
            api!(RedisModule_CreateCommand)(
                ctx.ctx,
                name.as_ptr(),
                entry,
                c"write fast".as_ptr(),
                1,
                1,
                1,
            )
        };
        if created != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!("fencelock-floor: could not create {name:?}"));
            return Status::Err;
        }
    }
    Status::Ok
}

#[cfg(not(test))]
macro_rules! allocator {
    () => {
        redis_module::alloc::RedisAlloc
    };
}

/// Unit tests run outside Redis, where its allocator does not exist.
#[cfg(test)]
macro_rules! allocator {
    () => {
        std::alloc::System
    };
}

redis_module! {
    name: "floor",
    version: 1,
    allocator: (allocator!(), allocator!()),
    data_types: [FLOOR_TYPE],
    init: init,
}
