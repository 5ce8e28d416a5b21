//! Command entry points. Each hands its handler Redis's own argv as borrowed strings
//! (redis-module's generic wrapper copies every argument into a retained string and
//! frees it afterwards, which shows on a hot path), runs it inside the guard and sends
//! the reply.

use std::ffi::c_int;
use std::mem::ManuallyDrop;

use redis_module::{raw, Context, RedisResult, RedisString, RedisValue};
use smallvec::SmallVec;

use super::{context_flags, panic_guard};

/// A command: its name (for the guard's report) and its handler over borrowed
/// arguments (argv[0] is the command name).
pub trait Command {
    const NAME: &'static str;
    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult;
}

/// The entry point Redis calls for `C`.
///
/// # Safety
/// Called by Redis with a live context and `argc` live argument strings.
pub unsafe extern "C" fn entry<C: Command>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let count = usize::try_from(argc).unwrap_or(0);
    let raw_args: &[*mut raw::RedisModuleString] = if argv.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` argument pointers that live for the call.
        unsafe { std::slice::from_raw_parts(argv, count) }
    };
    // Views without a reference of their own: never freed, as Redis owns the strings.
    // Up to eight live on the stack: no allocation for the commands' usual argv.
    let views: SmallVec<[ManuallyDrop<RedisString>; 8]> = raw_args
        .iter()
        .map(|&arg| ManuallyDrop::new(RedisString::from_redis_module_string(ctx, arg)))
        .collect();
    // SAFETY: `ManuallyDrop<T>` is `repr(transparent)` over `T`.
    let args = unsafe {
        &*(views.as_slice() as *const [ManuallyDrop<RedisString>] as *const [RedisString])
    };
    // The context's flags are read once for the whole command (`context_flags`).
    let result = context_flags::command_scope(ctx, || {
        panic_guard::command(C::NAME, || C::run(&context, args))
    });
    reply(&context, result)
}

/// Sends a command's result. The usual ones (a reply already written, an integer) go
/// straight to Redis: redis-module's general `Context::reply` is a large function
/// every command would otherwise pass through.
fn reply(context: &Context, result: RedisResult) -> c_int {
    match result {
        Ok(RedisValue::NoReply) => raw::REDISMODULE_OK as c_int,
        Ok(RedisValue::Integer(n)) => {
            // SAFETY: a live command context; nothing was replied yet.
            unsafe { api!(RedisModule_ReplyWithLongLong)(context.ctx, n) }
        }
        other => context.reply(other) as c_int,
    }
}
