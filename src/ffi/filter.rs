//! The command filter: a hook that sees every command's arguments just before it runs
//! and may replace one. Redis gives the filter no user data, so the one handler is kept
//! in a static set at load.

use std::ffi::c_int;
use std::sync::OnceLock;

use redis_module::{raw, Context};

use super::panic_guard;
use super::string_bytes::bytes_of;

/// The command being filtered.
pub struct FilteredCommand(*mut raw::RedisModuleCommandFilterCtx);

impl FilteredCommand {
    /// Argument `position` (0 is the command name), or empty when there is none.
    pub fn arg(&self, position: c_int) -> &[u8] {
        // SAFETY: Redis checks the position; a missing argument is NULL.
        let string = unsafe { api!(RedisModule_CommandFilterArgGet)(self.0, position) };
        // SAFETY: a live argument string, unchanged while the filter runs (an argument
        // is only replaced through `&mut self`).
        unsafe { bytes_of(string) }
    }

    /// Replaces argument `position` with `bytes`.
    pub fn replace(&mut self, position: c_int, bytes: &[u8]) {
        // SAFETY: a new string with no context, which Redis takes over in ArgReplace
        // and frees with the argument vector.
        unsafe {
            let string = api!(RedisModule_CreateString)(
                std::ptr::null_mut(),
                bytes.as_ptr().cast(),
                bytes.len(),
            );
            if !string.is_null() {
                api!(RedisModule_CommandFilterArgReplace)(self.0, position, string);
            }
        }
    }
}

static HANDLER: OnceLock<fn(&mut FilteredCommand)> = OnceLock::new();

/// Installs `handler` as the module's command filter; false if the server refused.
pub fn register(ctx: &Context, handler: fn(&mut FilteredCommand)) -> bool {
    if HANDLER.set(handler).is_err() {
        return false;
    }
    // SAFETY: registered once during load with a callback that lives forever.
    !unsafe { api!(RedisModule_RegisterCommandFilter)(ctx.ctx, Some(filter), 0) }.is_null()
}

unsafe extern "C" fn filter(command: *mut raw::RedisModuleCommandFilterCtx) {
    if let Some(handler) = HANDLER.get() {
        panic_guard::callback("the command filter", (), || {
            handler(&mut FilteredCommand(command));
        });
    }
}
