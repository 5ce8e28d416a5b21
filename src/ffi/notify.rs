//! Keyspace notifications the module emits (`notify-keyspace-events` flag `d`).

use std::ffi::CStr;

use redis_module::{Context, NotifyEvent, RedisString};

/// Emits the module-class event `event` for `key`.
pub fn module_event(ctx: &Context, event: &CStr, key: &RedisString) {
    // SAFETY: a static event name and a live key string on a live context.
    unsafe {
        api!(RedisModule_NotifyKeyspaceEvent)(
            ctx.ctx,
            NotifyEvent::MODULE.bits(),
            event.as_ptr(),
            key.inner,
        )
    };
}
