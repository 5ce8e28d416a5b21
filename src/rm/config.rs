//! Module configs (`CONFIG GET/SET fencelock.*`, `MODULE LOADEX … CONFIG`): registering
//! a numeric config, and applying the values Redis queued for them.

use std::ffi::c_int;
use std::sync::atomic::AtomicI64;

use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
use redis_module::{raw, Context};

/// Registers `fencelock.<name>`, kept in `value`, starting at `start`, in `min..=max`.
pub fn register_i64(
    ctx: &Context,
    name: &str,
    value: &'static AtomicI64,
    start: i64,
    min: i64,
    max: i64,
) {
    register_i64_configuration(
        ctx,
        name,
        value,
        start,
        min,
        max,
        ConfigurationFlags::DEFAULT,
        None,
    );
}

/// Applies `fencelock.*` values from the config file or `MODULE LOADEX … CONFIG`;
/// false when the server refused one.
pub fn load(ctx: &Context) -> bool {
    // SAFETY: called once, during load, after every config is registered.
    let status = unsafe { api!(RedisModule_LoadConfigs)(ctx.ctx) };
    status == raw::REDISMODULE_OK as c_int
}

/// Lets the module handle RDB read errors itself (a corrupt payload fails the load
/// instead of aborting the server).
pub fn handle_io_errors(ctx: &Context) {
    // SAFETY: a plain option setter on the load context.
    unsafe {
        api!(RedisModule_SetModuleOptions)(
            ctx.ctx,
            raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int,
        )
    };
}
