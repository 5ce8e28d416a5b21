//! The calling user's key permissions, for commands that name no key (the session
//! commands find their keys themselves, so Redis cannot check them before the call).

use redis_module::{raw, Context};

use super::string_bytes::bytes_of;

/// What a command would do to a key.
#[derive(Clone, Copy, Debug)]
pub enum Access {
    Read,
    Write,
}

/// The user the calling client is authenticated as, held for the command.
pub struct CallingUser {
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    user: *mut raw::RedisModuleUser,
}

impl CallingUser {
    /// The calling client's user; `None` where no client calls (nothing to check).
    pub fn of(ctx: &Context) -> Option<Self> {
        // SAFETY: plain accessor on a live context; the string is ours to free.
        let name = unsafe { api!(RedisModule_GetCurrentUserName)(ctx.ctx) };
        if name.is_null() {
            return None;
        }
        // SAFETY: a user name string made above; the user is ours to free.
        let user = unsafe { api!(RedisModule_GetModuleUserFromUserName)(name) };
        if user.is_null() {
            // SAFETY: made above for this context, freed once.
            unsafe { api!(RedisModule_FreeString)(ctx.ctx, name) };
            return None;
        }
        Some(CallingUser {
            ctx: ctx.ctx,
            name,
            user,
        })
    }

    /// The user's name, as `ACL WHOAMI` says it.
    pub fn name(&self) -> &[u8] {
        // SAFETY: the string lives as long as `self`.
        unsafe { bytes_of(self.name) }
    }

    /// Whether the user may `access` the key `name`.
    pub fn may(&self, name: &[u8], access: Access) -> bool {
        // Only the operation flags are accepted here (`RO`/`RW` make the call fail):
        // `ACCESS` asks for read permission, `UPDATE` for write.
        let flags = match access {
            Access::Read => raw::REDISMODULE_CMD_KEY_ACCESS,
            Access::Write => raw::REDISMODULE_CMD_KEY_UPDATE,
        };
        // SAFETY: a buffer with its length; no context: freed below.
        let key = unsafe {
            api!(RedisModule_CreateString)(std::ptr::null_mut(), name.as_ptr().cast(), name.len())
        };
        // SAFETY: the user held by `self` and the key string made above.
        let allowed = unsafe {
            api!(RedisModule_ACLCheckKeyPermissions)(self.user, key, flags as std::ffi::c_int)
        } == raw::REDISMODULE_OK as std::ffi::c_int;
        // SAFETY: made above without a context, freed once.
        unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), key) };
        allowed
    }
}

impl Drop for CallingUser {
    fn drop(&mut self) {
        // SAFETY: both were made in `of` for this value and are freed once, here.
        unsafe {
            api!(RedisModule_FreeModuleUser)(self.user);
            api!(RedisModule_FreeString)(self.ctx, self.name);
        }
    }
}
