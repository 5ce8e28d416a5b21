//! Declaring a command's keys to Redis when it asks (`getkeys-api`): the lock or mark
//! key, and the keys of the command run inside, as Redis itself finds them. That is
//! what lets Redis Cluster route `LOCK.GUARD` and `LOCK.FENCED` (`MOVED`, `CROSSSLOT`)
//! and ACL check every key they touch.

use std::ffi::c_int;

use redis_module::{raw, Context, RedisString};

/// Whether Redis is asking for key positions rather than running the command.
pub fn is_position_request(ctx: &Context) -> bool {
    // SAFETY: a plain accessor on a live context.
    unsafe { api!(RedisModule_IsKeysPositionRequest)(ctx.ctx) != 0 }
}

/// Key-spec flags for a declared key.
#[derive(Clone, Copy)]
pub struct Access(c_int);

/// Read, to check a lock (`LOCK.GUARD`'s lock key).
pub const READ: Access =
    Access((raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as c_int);
/// Read and update (`LOCK.FENCED`'s mark).
pub const UPDATE: Access =
    Access((raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE) as c_int);

/// Declares the key at `position` of this command's argv.
pub fn declare(ctx: &Context, position: usize, access: Access) {
    let Ok(position) = c_int::try_from(position) else {
        return;
    };
    // SAFETY: called while Redis asks for key positions.
    unsafe { api!(RedisModule_KeyAtPosWithFlags)(ctx.ctx, position, access.0) };
}

/// Declares the keys of the command `inner` (name first) found at `offset` of this
/// command's argv, with the flags Redis gives them. An unknown command declares none
/// (it is refused when it runs).
pub fn declare_inner(ctx: &Context, inner: &[RedisString], offset: usize) {
    for (position, access) in inner_keys(ctx, inner) {
        declare(ctx, position + offset, access);
    }
}

/// The keys of the command `inner` (name first), as its own rules find them.
pub fn inner_key_names<'a>(ctx: &Context, inner: &'a [RedisString]) -> Vec<&'a [u8]> {
    inner_keys(ctx, inner)
        .into_iter()
        .filter_map(|(position, _)| inner.get(position).map(RedisString::as_slice))
        .collect()
}

/// Positions (in `inner`) and flags of the keys of the command `inner`.
fn inner_keys(ctx: &Context, inner: &[RedisString]) -> Vec<(usize, Access)> {
    let mut argv: Vec<*mut raw::RedisModuleString> = inner.iter().map(|arg| arg.inner).collect();
    let Ok(argc) = c_int::try_from(argv.len()) else {
        return Vec::new();
    };
    let mut count: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    // SAFETY: a live argument vector of `argc` strings; Redis allocates the results.
    let positions = unsafe {
        api!(RedisModule_GetCommandKeysWithFlags)(
            ctx.ctx,
            argv.as_mut_ptr(),
            argc,
            &mut count,
            &mut flags,
        )
    };
    if positions.is_null() {
        return Vec::new();
    }
    let count = usize::try_from(count).unwrap_or(0);
    // SAFETY: Redis returned `count` positions, and as many flags (or none).
    let (positions_slice, flags_slice) = unsafe {
        (
            std::slice::from_raw_parts(positions, count),
            (!flags.is_null()).then(|| std::slice::from_raw_parts(flags, count)),
        )
    };
    let keys = positions_slice
        .iter()
        .enumerate()
        .filter_map(|(i, &position)| {
            let access = flags_slice
                .and_then(|f| f.get(i).copied())
                .unwrap_or(UPDATE.0);
            usize::try_from(position).ok().map(|p| (p, Access(access)))
        })
        .collect();
    // SAFETY: both arrays were allocated by Redis for this call.
    unsafe {
        api!(RedisModule_Free)(positions.cast());
        if !flags.is_null() {
            api!(RedisModule_Free)(flags.cast());
        }
    }
    keys
}
