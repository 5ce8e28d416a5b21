//! Load-time setup beyond the `redis_module!` table: IO-error handling for RDB loads,
//! ACL categories where the server supports them, and the flush subscription.

use std::ffi::{c_int, CString};

use redis_module::{raw, server_events::FlushSubevent, Context, Status};
use redis_module_macros::flush_event_handler;

use crate::blocking;

/// Each command's ACL categories beyond the module's own `fencelock` category.
const COMMAND_CATEGORIES: [(&str, &str); 6] = [
    ("lock.acquire", "write fast"),
    ("lock.refresh", "write fast"),
    ("lock.release", "write fast"),
    ("lock.fence", "read fast"),
    ("lock.info", "read fast"),
    ("lock.apply", "write fast"),
];

pub fn init(ctx: &Context) -> Status {
    // SAFETY: a plain option setter on the load context.
    if let Some(set_options) = api!(RedisModule_SetModuleOptions) {
        unsafe { set_options(ctx.ctx, raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int) };
    }
    set_acl_categories(ctx);
    Status::Ok
}

/// Redis 7.2 lets modules put commands in categories, 7.4 lets them add their own
/// (`+@fencelock`). On older servers module commands belong to no category.
fn set_acl_categories(ctx: &Context) {
    let (Some(get_command), Some(set_categories)) = (
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandACLCategories),
    ) else {
        return;
    };
    let own_category = api!(RedisModule_AddACLCategory).is_some_and(|add| {
        CString::new("fencelock")
            // SAFETY: called during load with a valid C string.
            .is_ok_and(
                |name| unsafe { add(ctx.ctx, name.as_ptr()) } == raw::REDISMODULE_OK as c_int,
            )
    });
    for (command, categories) in COMMAND_CATEGORIES {
        let categories = if own_category {
            format!("{categories} fencelock")
        } else {
            categories.to_string()
        };
        let (Ok(command), Ok(categories)) = (CString::new(command), CString::new(categories))
        else {
            continue;
        };
        // SAFETY: the command was registered by the module table before init runs.
        unsafe {
            let handle = get_command(ctx.ctx, command.as_ptr());
            if !handle.is_null()
                && set_categories(handle, categories.as_ptr()) != raw::REDISMODULE_OK as c_int
            {
                ctx.log_warning("fencelock: could not set ACL categories");
            }
        }
    }
}

#[flush_event_handler]
fn flushed(ctx: &Context, subevent: FlushSubevent) {
    if matches!(subevent, FlushSubevent::Ended) {
        blocking::all_keys_vacated(ctx);
    }
}
