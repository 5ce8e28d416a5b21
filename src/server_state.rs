//! What the server is doing right now, as far as handing off locks is concerned: the
//! selected database, whether the current client may block, and whether a timer may
//! write to the keyspace.

use std::ffi::c_int;

use redis_module::{raw, Context};

/// The database the context's client has selected.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: plain accessor on a live context.
    api!(RedisModule_GetSelectedDb).map_or(0, |db| unsafe { db(ctx.ctx) })
}

pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: plain setter on a live context that has a client.
    api!(RedisModule_SelectDb)
        .is_some_and(|select| unsafe { select(ctx.ctx, db) } == raw::REDISMODULE_OK as c_int)
}

/// The context's `REDISMODULE_CTX_FLAGS_*`, or `None` if the server cannot tell.
pub fn context_flags(ctx: &Context) -> Option<c_int> {
    // SAFETY: plain accessor on a live context.
    api!(RedisModule_GetContextFlags).map(|flags| unsafe { flags(ctx.ctx) })
}

/// Whether a timer may write to the keyspace now.
#[derive(PartialEq, Eq)]
pub enum Writes {
    Allowed,
    /// Writes are paused (`FAILOVER`, `CLIENT PAUSE WRITE`): Redis then treats expired
    /// keys as absent without deleting them, so writing one would collide with the
    /// still-present key. Retry shortly.
    Paused,
    /// A replica's keyspace follows its primary; there is nothing to hand off here.
    Replica,
}

pub fn writes(ctx: &Context) -> Writes {
    let flags = context_flags(ctx).unwrap_or(0);
    if flags & raw::REDISMODULE_CTX_FLAGS_SLAVE as c_int != 0 {
        return Writes::Replica;
    }
    // SAFETY: reads server state only.
    if api!(RedisModule_AvoidReplicaTraffic).is_some_and(|f| unsafe { f() } != 0) {
        return Writes::Paused;
    }
    Writes::Allowed
}

/// Clients may block unless they run inside MULTI, a script or a function, or a
/// context that forbids blocking; there BLOCK behaves as a plain acquire.
pub fn can_block(ctx: &Context) -> bool {
    let flags = context_flags(ctx).unwrap_or(0);
    let forbidding = raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | raw::REDISMODULE_CTX_FLAGS_LOADING;
    flags & forbidding as c_int == 0
}
