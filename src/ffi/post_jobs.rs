//! Work that must follow a keyspace notification in the same step: Redis 7.2+ and
//! Valkey run a post-notification job when the command (or expiry, or eviction) that
//! announced the change is done and writing is safe, before the server does anything
//! else, and replicate its writes with that command. A module timer, even one of 0 ms,
//! may fire only after the next client's command (the server rounds its event-loop
//! timer to whole milliseconds), so a client could see the change before its effect.
//! Redis 7.0 has no such jobs: callers fall back to a timer there.

use std::ffi::c_void;

use redis_module::{raw, Context};

use super::panic_guard;

/// What a job carries and does when it runs.
pub trait Job: Sized + 'static {
    /// For the guard's report.
    const NAME: &'static str;
    fn run(self, ctx: &Context);
}

/// Queues `job` to run right after the current notification's step. Gives it back when
/// the server cannot (Redis 7.0, or while loading, or on a read-only replica).
pub fn after_notification<J: Job>(ctx: &Context, job: J) -> Result<(), J> {
    let Some(add) = optional_api!(RedisModule_AddPostNotificationJob) else {
        return Err(job);
    };
    let data = Box::into_raw(Box::new(job));
    // SAFETY: Redis hands `data` to `ran::<J>` once if it accepted the job; if it
    // refused, it kept nothing and the Box is taken back below.
    let added = unsafe { add(ctx.ctx, Some(ran::<J>), data.cast(), None) };
    if added == raw::REDISMODULE_OK as i32 {
        Ok(())
    } else {
        // SAFETY: refused, so `data` is still only ours.
        Err(*unsafe { Box::from_raw(data) })
    }
}

unsafe extern "C" fn ran<J: Job>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: made by `after_notification::<J>`, handed back by Redis exactly once.
    let job = *unsafe { Box::from_raw(data.cast::<J>()) };
    panic_guard::callback(J::NAME, (), || job.run(&Context::new(ctx)));
}
