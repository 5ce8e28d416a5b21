//! The context's `REDISMODULE_CTX_FLAGS_*`, read once per command.
//!
//! `RedisModule_GetContextFlags` computes every flag each time it is called (the
//! client's MULTI/script state, the server's role, AOF, cluster, memory state), and a
//! grant asks it several questions (out of memory? may it block? does anything read
//! the replication stream?). So a command's entry point (`argv::entry`) opens a scope
//! in which the first read of its context's flags is kept and every later question on
//! that same context is answered from it. Nothing a command does changes the flags it
//! asks about while it runs. Outside a command (timers, blocked-client callbacks,
//! events) and on any other context (a keyspace notification's, a nested command's),
//! the flags are read afresh.

use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering::Relaxed};

use redis_module::{raw, Context};

/// The flags of one context at one moment.
#[derive(Clone, Copy)]
pub struct Flags(pub(super) c_int);

impl Flags {
    /// The flags of `ctx`: kept ones if a command runs on `ctx`, else read now.
    pub fn of(ctx: &Context) -> Flags {
        if SCOPE_CTX.load(Relaxed) != ctx.ctx {
            return Flags(read(ctx.ctx));
        }
        let kept = SCOPE_FLAGS.load(Relaxed);
        if kept != UNREAD {
            return Flags(kept);
        }
        let flags = read(ctx.ctx);
        SCOPE_FLAGS.store(flags, Relaxed);
        Flags(flags)
    }

    fn any(self, mask: u32) -> bool {
        self.0 & mask as c_int != 0
    }

    fn all(self, mask: u32) -> bool {
        self.0 & mask as c_int == mask as c_int
    }

    /// Whether the server writes an AOF or is a replica.
    pub fn aof_or_replica(self) -> bool {
        self.any(raw::REDISMODULE_CTX_FLAGS_AOF | raw::REDISMODULE_CTX_FLAGS_SLAVE)
    }

    /// Whether the server is a replica.
    pub fn replica(self) -> bool {
        self.any(raw::REDISMODULE_CTX_FLAGS_SLAVE)
    }

    /// Whether the server is a read-only replica.
    pub fn read_only_replica(self) -> bool {
        self.all(raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_READONLY)
    }

    /// Whether the server is over `maxmemory` (and could not evict below it).
    pub fn out_of_memory(self) -> bool {
        self.any(raw::REDISMODULE_CTX_FLAGS_OOM)
    }

    /// Whether the server is a Redis Cluster node.
    pub fn in_cluster(self) -> bool {
        self.any(raw::REDISMODULE_CTX_FLAGS_CLUSTER)
    }

    /// Whether the context runs inside `MULTI`/`EXEC`, a script or a function.
    pub fn in_multi_or_script(self) -> bool {
        self.any(raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA)
    }

    /// Whether the context's client may block: not inside MULTI, a script or a
    /// function, not replicated or loaded, and not in a context that forbids it.
    pub fn can_block(self) -> bool {
        !self.any(
            raw::REDISMODULE_CTX_FLAGS_MULTI
                | raw::REDISMODULE_CTX_FLAGS_LUA
                | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
                | raw::REDISMODULE_CTX_FLAGS_REPLICATED
                | raw::REDISMODULE_CTX_FLAGS_LOADING,
        )
    }

    /// Whether `maxmemory` is set with a policy that may evict keys.
    pub fn eviction_possible(self) -> bool {
        self.any(raw::REDISMODULE_CTX_FLAGS_EVICT)
    }
}

// The command running now: its context (null: none) and its flags once read. Plain
// statics rather than a thread-local, whose every access in a shared object goes
// through `__tls_get_addr`: commands run on Redis's main thread only, and a context
// of another thread never matches the one kept here.
static SCOPE_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(ptr::null_mut());
static SCOPE_FLAGS: AtomicI32 = AtomicI32::new(UNREAD);

/// No flag read yet (the flags are bits below the sign bit).
const UNREAD: c_int = -1;

/// Whether a command's entry point runs on `ctx` now (its scope is open).
pub fn in_scope(ctx: &Context) -> bool {
    SCOPE_CTX.load(Relaxed) == ctx.ctx
}

/// Runs the command `body` on `ctx` with its flags kept for the command, then restores
/// the scope of the command around it, if any (a command called from a guard's inner
/// command through `RM_Call`). `body` must not unwind (the panic guard runs inside).
pub fn command_scope<R>(ctx: *mut raw::RedisModuleCtx, body: impl FnOnce() -> R) -> R {
    // Loads and stores rather than swaps: one thread only, and a swap is a locked
    // instruction on every command.
    let outer = (SCOPE_CTX.load(Relaxed), SCOPE_FLAGS.load(Relaxed));
    SCOPE_CTX.store(ctx, Relaxed);
    SCOPE_FLAGS.store(UNREAD, Relaxed);
    let result = body();
    SCOPE_CTX.store(outer.0, Relaxed);
    SCOPE_FLAGS.store(outer.1, Relaxed);
    result
}

/// Reads `ctx`'s flags from the server (also a context of the module's own, which no
/// command runs on).
pub(super) fn read(ctx: *mut raw::RedisModuleCtx) -> c_int {
    // SAFETY: plain accessor on a live context.
    unsafe { api!(RedisModule_GetContextFlags)(ctx) }
}
