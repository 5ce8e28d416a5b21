//! The entry points Redis calls for each command. They hand the handler Redis's own
//! argv as borrowed strings: redis-module's generic wrapper copies every argument into
//! a retained string and frees it afterwards, which shows on a hot path.

use std::ffi::c_int;
use std::mem::ManuallyDrop;

use redis_module::{raw, Context, RedisResult, RedisString};

/// A command handler over borrowed arguments (argv[0] is the command name).
pub type Handler = fn(&Context, &[RedisString]) -> RedisResult;

/// Runs `handler` on the call's arguments and sends its reply.
///
/// # Safety
/// `argv` must point at `argc` module strings that stay alive for the call, as Redis
/// guarantees for a command's arguments.
pub unsafe fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let context = Context::new(ctx);
    let count = usize::try_from(argc).unwrap_or(0);
    let raw_args: &[*mut raw::RedisModuleString] = if argv.is_null() || count == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(argv, count)
    };
    // Views without a reference of their own: never freed, as Redis owns the strings.
    let views: Vec<ManuallyDrop<RedisString>> = raw_args
        .iter()
        .map(|&arg| ManuallyDrop::new(RedisString::from_redis_module_string(ctx, arg)))
        .collect();
    // SAFETY: `ManuallyDrop<T>` is `repr(transparent)` over `T`.
    let args = &*(views.as_slice() as *const [ManuallyDrop<RedisString>] as *const [RedisString]);
    context.reply(handler(&context, args)) as c_int
}

/// Defines an `extern "C"` command entry point that calls `run` with a handler.
macro_rules! entry_point {
    ($name:ident, $handler:path) => {
        /// Command entry point registered with Redis.
        ///
        /// # Safety
        /// Called by Redis with a live context and the command's argv.
        pub unsafe extern "C" fn $name(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            $crate::dispatch::run(ctx, argv, argc, $handler)
        }
    };
}

entry_point!(acquire, crate::commands::acquire::command);
entry_point!(refresh, crate::commands::refresh::command);
entry_point!(release, crate::commands::release::command);
entry_point!(fence, crate::commands::fence::command);
entry_point!(info, crate::commands::info::command);
entry_point!(apply, crate::commands::apply::command);
