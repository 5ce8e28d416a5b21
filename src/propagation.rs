//! Whether anything reads the replication stream, which decides how a lock change is
//! propagated.
//!
//! Effects (`LOCK.APPLY … PXAT …`, `PEXPIREAT`, `DEL`) make replicas and the AOF exact,
//! but building them costs as much as the rest of an acquire. Redis itself drops every
//! propagated command when there is no AOF and no replication backlog, so while that is
//! so the command is propagated verbatim instead: nothing reads it, and it still counts
//! as a change for `save` rules. The moment an AOF is on, or a replica has ever started
//! to sync (the backlog outlives its last replica), effects are used, for good.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{raw, Context};

/// Set once a replica started syncing, this server was a replica, or the server
/// reported a backlog or replicas; never cleared.
static REPLICATION_SEEN: AtomicBool = AtomicBool::new(false);

/// A replica is attaching (seen by the command filter before Redis handles it).
pub fn replication_started() {
    REPLICATION_SEEN.store(true, Ordering::Relaxed);
}

/// Whether this change must be propagated as explicit effects.
pub fn effects_needed(ctx: &Context) -> bool {
    if REPLICATION_SEEN.load(Ordering::Relaxed) {
        return true;
    }
    // Unknown flags count as "AOF or replica": effects are the safe side.
    let flags = crate::server_state::context_flags(ctx).unwrap_or(-1);
    let aof_or_replica = (raw::REDISMODULE_CTX_FLAGS_AOF | raw::REDISMODULE_CTX_FLAGS_SLAVE) as i32;
    if flags & aof_or_replica != 0 {
        return true;
    }
    // Outside a command (timers, callbacks) there is no client command to propagate
    // verbatim: use effects.
    // SAFETY: reads the context's current command, if any.
    api!(RedisModule_GetCurrentCommandName).is_none_or(|name| unsafe { name(ctx.ctx) }.is_null())
}

/// Asks the server (at load, after loading data, on a role change) whether it already
/// has replicas, a replication backlog, or a primary.
pub fn check_server(ctx: &Context) {
    let (Some(get_info), Some(field), Some(free_info)) = (
        api!(RedisModule_GetServerInfo),
        api!(RedisModule_ServerInfoGetFieldC),
        api!(RedisModule_FreeServerInfo),
    ) else {
        // Without a way to ask, assume the stream is read.
        replication_started();
        return;
    };
    // SAFETY: the info object lives until `free_info`; the C strings it hands out are
    // read before that and never kept.
    unsafe {
        let info = get_info(ctx.ctx, c"replication".as_ptr());
        if info.is_null() {
            replication_started();
            return;
        }
        let value = |name: &CStr| -> Option<&[u8]> {
            let text = field(info, name.as_ptr());
            (!text.is_null()).then(|| CStr::from_ptr(text).to_bytes())
        };
        let replicated = value(c"role").is_some_and(|role| role != b"master")
            || value(c"connected_slaves").is_some_and(|n| n != b"0")
            || value(c"repl_backlog_active").is_some_and(|active| active != b"0");
        free_info(ctx.ctx, info);
        if replicated {
            replication_started();
        }
    }
}
