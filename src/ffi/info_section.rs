//! The module's INFO section (`INFO fencelock`, `INFO modules`, `INFO everything`):
//! one named section of integer fields, which Redis prefixes with the module's name.

use std::ffi::{c_int, CStr};
use std::sync::OnceLock;

use redis_module::{raw, Context};

use super::panic_guard;

/// The section's name and a function giving its fields now.
struct Section {
    name: &'static CStr,
    fields: fn() -> Vec<(&'static CStr, i64)>,
}

static SECTION: OnceLock<Section> = OnceLock::new();

/// Registers the section; false on failure.
pub fn register(
    ctx: &Context,
    name: &'static CStr,
    fields: fn() -> Vec<(&'static CStr, i64)>,
) -> bool {
    if SECTION.set(Section { name, fields }).is_err() {
        return false;
    }
    // SAFETY: a static callback, registered once during load.
    let status = unsafe { api!(RedisModule_RegisterInfoFunc)(ctx.ctx, Some(info)) };
    status == raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    let Some(section) = SECTION.get() else {
        return;
    };
    let fields = panic_guard::callback("INFO", Vec::new(), section.fields);
    // SAFETY: the info context Redis passed in, static C strings.
    unsafe {
        api!(RedisModule_InfoAddSection)(ctx, section.name.as_ptr());
        for (field, value) in fields {
            api!(RedisModule_InfoAddFieldLongLong)(ctx, field.as_ptr(), value);
        }
    }
}
