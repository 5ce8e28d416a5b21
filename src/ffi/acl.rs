//! The calling user's permissions on keys, for commands that name no key (the session
//! commands find their keys themselves, so Redis cannot check them before the call):
//! each key is checked as the keyed command that does the same to it would be.

use redis_module::{raw, Context};

use super::string_bytes::bytes_of;

/// The keyed command a session command does to each key, whose permission it needs
/// there: a user may keep a session's lease on a key alive only where it may refresh it,
/// end it only where it may release it, list it only where it may read it.
#[derive(Clone, Copy, Debug)]
pub enum AsCommand {
    Refresh,
    Release,
    Info,
}

impl AsCommand {
    /// The argv of that command on `key` (placeholder token and ttl: only the command
    /// and its key decide a permission).
    fn argv(self, key: &[u8]) -> Vec<&[u8]> {
        match self {
            AsCommand::Refresh => vec![b"LOCK.REFRESH", key, b"t", b"1"],
            AsCommand::Release => vec![b"LOCK.RELEASE", key, b"t"],
            AsCommand::Info => vec![b"LOCK.INFO", key],
        }
    }
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

    /// Whether the user may read the key `name` as `LOCK.TOP` shows it: may run
    /// `LOCK.INFO` on it, one and the same selector allowing the command and the key.
    /// (A key pattern alone is not enough: Redis's key check accepts a key that any
    /// selector names, one that grants no command included.)
    pub fn may_read(&self, name: &[u8]) -> bool {
        self.may(name, AsCommand::Info)
    }

    /// Whether the user may run `command` on the key `name`: the command and the key
    /// allowed by one and the same selector, as Redis checks a command it runs itself.
    pub fn may(&self, name: &[u8], command: AsCommand) -> bool {
        let create = api!(RedisModule_CreateString);
        let mut argv: Vec<*mut raw::RedisModuleString> = command
            .argv(name)
            .iter()
            // SAFETY: a buffer with its length; no context: freed below.
            .map(|arg| unsafe { create(std::ptr::null_mut(), arg.as_ptr().cast(), arg.len()) })
            .collect();
        let argc = std::ffi::c_int::try_from(argv.len()).unwrap_or(0);
        // SAFETY: the user held by `self` and an argv of module strings made above.
        let allowed = unsafe {
            api!(RedisModule_ACLCheckCommandPermissions)(self.user, argv.as_mut_ptr(), argc)
        } == raw::REDISMODULE_OK as std::ffi::c_int;
        let free = api!(RedisModule_FreeString);
        for arg in argv {
            // SAFETY: made above without a context, freed once.
            unsafe { free(std::ptr::null_mut(), arg) };
        }
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
