//! The module's INFO section (`INFO fencelock`, `INFO modules`, `INFO everything`):
//! one named section of fields (integers, and text such as percentiles), which Redis
//! prefixes with the module's name.

use std::ffi::{c_int, CStr, CString};
use std::sync::OnceLock;

use redis_module::{raw, Context};

use super::panic_guard;

/// A field's value.
pub enum Value {
    Int(i64),
    /// Written as it is (`p50=1.000,p99=…`, as Redis writes its latencystats).
    Text(CString),
}

/// The section's fields now.
pub type Fields = fn() -> Vec<(&'static CStr, Value)>;

/// The section's name and a function giving its fields now.
struct Section {
    name: &'static CStr,
    fields: Fields,
}

static SECTION: OnceLock<Section> = OnceLock::new();

/// Registers the section; false on failure.
pub fn register(ctx: &Context, name: &'static CStr, fields: Fields) -> bool {
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
            match value {
                Value::Int(value) => {
                    api!(RedisModule_InfoAddFieldLongLong)(ctx, field.as_ptr(), value);
                }
                Value::Text(text) => {
                    api!(RedisModule_InfoAddFieldCString)(ctx, field.as_ptr(), text.as_ptr());
                }
            }
        }
    }
}
