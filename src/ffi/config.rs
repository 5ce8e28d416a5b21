//! Module configs (`CONFIG GET/SET fencelock.*`, `MODULE LOADEX … CONFIG`): registering
//! a numeric or a yes/no config, and applying the values Redis queued for them.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI64};

use redis_module::configuration::{
    register_bool_configuration, register_i64_configuration, ConfigurationFlags,
};
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

/// Registers the `yes`/`no` config `fencelock.<name>`, kept in `value`, starting at
/// `start`.
pub fn register_bool(ctx: &Context, name: &str, value: &'static AtomicBool, start: bool) {
    register_bool_configuration(ctx, name, value, start, ConfigurationFlags::DEFAULT, None);
}

/// Applies `fencelock.*` values from the config file or `MODULE LOADEX … CONFIG`;
/// false when the server refused one.
pub fn load(ctx: &Context) -> bool {
    // SAFETY: called once, during load, after every config is registered.
    let status = unsafe { api!(RedisModule_LoadConfigs)(ctx.ctx) };
    status == raw::REDISMODULE_OK as c_int
}

/// The module's options: it handles RDB read errors itself (a corrupt payload fails
/// the load instead of aborting the server), and it tells Redis which keys it changed
/// (`open_key`) instead of Redis assuming every key it opened for writing changed;
/// `more` adds this server's own (`slot_migration::module_options`).
pub fn set_options(ctx: &Context, more: c_int) {
    let options = (raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED) as c_int
        | more;
    // SAFETY: a plain option setter on the load context.
    unsafe { api!(RedisModule_SetModuleOptions)(ctx.ctx, options) };
}
