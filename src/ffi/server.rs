//! What the server is doing right now: the selected database, the calling client,
//! whether it may block, whether a timer may write to the keyspace, whether a command
//! is running, and whether the server replicates (from its INFO). The answers drawn
//! from the context's flags read them through `context_flags` (once per command).

use std::ffi::{c_char, c_int, CStr};

use redis_module::{raw, Context};

use super::context_flags::{self, Flags};

/// The database the context's client has selected.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: plain accessor on a live context.
    unsafe { api!(RedisModule_GetSelectedDb)(ctx.ctx) }
}

pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: plain setter on a live context that has a client.
    unsafe { api!(RedisModule_SelectDb)(ctx.ctx, db) == raw::REDISMODULE_OK as c_int }
}

/// The calling client's `CLIENT ID`.
pub fn client_id(ctx: &Context) -> u64 {
    // SAFETY: plain accessor on a live context.
    unsafe { api!(RedisModule_GetClientId)(ctx.ctx) }
}

/// Whether the server writes an AOF or is a replica right now.
pub fn aof_or_replica(ctx: &Context) -> bool {
    Flags::of(ctx).aof_or_replica()
}

/// Whether this server is a read-only replica.
pub fn read_only_replica(ctx: &Context) -> bool {
    Flags::of(ctx).read_only_replica()
}

/// Whether the server is over `maxmemory` now (and could not evict below it): what
/// needs new memory is refused then, as Redis refuses `deny-oom` commands. The lock
/// commands are not `deny-oom` themselves, so that what only keeps a lock (a refresh,
/// a holder's retry, a fenced read) still runs.
pub fn out_of_memory(ctx: &Context) -> bool {
    Flags::of(ctx).out_of_memory()
}

/// Whether this server is a Redis Cluster node.
pub fn in_cluster(ctx: &Context) -> bool {
    Flags::of(ctx).in_cluster()
}

/// Whether a client command is running on this context (not a timer or a callback).
pub fn in_command(ctx: &Context) -> bool {
    // A command's own context is known without asking (the question of every write).
    context_flags::in_scope(ctx)
        // SAFETY: reads the context's current command, if any.
        || !unsafe { api!(RedisModule_GetCurrentCommandName)(ctx.ctx) }.is_null()
}

/// Asks the server's INFO section `section`, judged by `judge` (which gets each field's
/// value by name); `None` without an answer.
fn ask_info(
    ctx: &Context,
    section: &CStr,
    judge: impl FnOnce(&dyn Fn(&CStr) -> Option<Vec<u8>>) -> bool,
) -> Option<bool> {
    ask_info_on(ctx.ctx, section, judge)
}

/// `ask_info` on a raw context, or on none (null: the command filter has no context,
/// and Redis and Valkey only use it to free the answer automatically).
fn ask_info_on(
    ctx: *mut raw::RedisModuleCtx,
    section: &CStr,
    judge: impl FnOnce(&dyn Fn(&CStr) -> Option<Vec<u8>>) -> bool,
) -> Option<bool> {
    let (get_info, field, free_info) = (
        api!(RedisModule_GetServerInfo),
        api!(RedisModule_ServerInfoGetFieldC),
        api!(RedisModule_FreeServerInfo),
    );
    // SAFETY: the info object lives until `free_info`; the C strings it hands out are
    // copied before that and never kept.
    unsafe {
        let info = get_info(ctx, section.as_ptr());
        if info.is_null() {
            return None;
        }
        let value = |name: &CStr| -> Option<Vec<u8>> {
            let text = field(info, name.as_ptr());
            (!text.is_null()).then(|| CStr::from_ptr(text).to_bytes().to_vec())
        };
        let verdict = judge(&value);
        free_info(ctx, info);
        Some(verdict)
    }
}

/// The fields of INFO stats that only grow, except at a `CONFIG RESETSTAT` the server
/// really ran, which sets each back to 0: commands processed, bytes read from clients,
/// reads, connections received. Several, because after a reset each grows again with
/// what comes next in the same turn of the event loop, and any one can outgrow what it
/// was before (a reset followed by more commands than had run since the last one, by a
/// long read, by new connections); all of them together hardly can.
pub const RESET_MARKS: [&CStr; 4] = [
    c"total_commands_processed",
    c"total_net_input_bytes",
    c"total_reads_processed",
    c"total_connections_received",
];

/// The `RESET_MARKS` fields now (a field the server does not have reads 0, which never
/// goes back). Asked without a context, so the command filter may ask it too.
pub fn reset_marks() -> Option<[u64; RESET_MARKS.len()]> {
    let mut marks = [0; RESET_MARKS.len()];
    ask_info_on(std::ptr::null_mut(), c"stats", |value| {
        for (mark, name) in marks.iter_mut().zip(RESET_MARKS) {
            *mark = value(name)
                .and_then(|n| std::str::from_utf8(&n).ok()?.parse().ok())
                .unwrap_or(0);
        }
        true
    })?;
    Some(marks)
}

/// Asks the server's INFO whether it has replicas, a replication backlog, or a primary.
pub fn replicates(ctx: &Context) -> bool {
    ask_info(ctx, c"replication", |value| {
        value(c"role").is_some_and(|role| role != b"master")
            || value(c"connected_slaves").is_some_and(|n| n != b"0")
            || value(c"repl_backlog_active").is_some_and(|active| active != b"0")
    })
    // Without an answer, assume the stream is read: effects are the safe side.
    .unwrap_or(true)
}

/// Whether the server is Valkey (its INFO names itself; Redis's has no such field).
pub fn is_valkey(ctx: &Context) -> bool {
    ask_info(ctx, c"server", |value| {
        value(c"server_name").is_some_and(|name| name.eq_ignore_ascii_case(b"valkey"))
    })
    .unwrap_or(false)
}

/// Whether an AOF rewrite is running (its child was just forked, say).
pub fn aof_rewrite_running(ctx: &Context) -> bool {
    ask_info(ctx, c"persistence", |value| {
        value(c"aof_rewrite_in_progress").is_some_and(|running| running == b"1")
    })
    .unwrap_or(false)
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
    if Flags::of(ctx).replica() {
        return Writes::Replica;
    }
    if !writes_paused() {
        return Writes::Allowed;
    }
    // Redis 7.0 ends a pause only once its *cached* clock is past the pause's end, and
    // outside commands only its cron moves that clock (every 100 ms at hz 10): a
    // handoff would wait for it. Any command call moves it, so a `PING` does.
    let _ = ctx.call("PING", &[] as &[&str]);
    if writes_paused() {
        Writes::Paused
    } else {
        Writes::Allowed
    }
}

fn writes_paused() -> bool {
    // SAFETY: reads server state only.
    unsafe { api!(RedisModule_AvoidReplicaTraffic)() != 0 }
}

/// Whether the command runs inside `MULTI`/`EXEC`, a script or a function: one atomic
/// step with the commands around it.
pub fn in_multi_or_script(ctx: &Context) -> bool {
    Flags::of(ctx).in_multi_or_script()
}

/// Clients may block unless they run inside MULTI, a script or a function, or a
/// context that forbids blocking; there BLOCK behaves as a plain acquire.
pub fn can_block(ctx: &Context) -> bool {
    Flags::of(ctx).can_block()
}

/// A context of the module's own, made once, for asking the server about itself where
/// Redis hands over no context (an INFO callback).
struct Detached(*mut raw::RedisModuleCtx);

// SAFETY: used only on Redis's main thread (INFO callbacks); the pointer is never freed.
unsafe impl Send for Detached {}
// SAFETY: as for Send: one thread uses it, and nothing writes through it.
unsafe impl Sync for Detached {}

static DETACHED: std::sync::OnceLock<Detached> = std::sync::OnceLock::new();

/// Remembers a detached context for `eviction_possible` (once, at load).
pub fn keep_detached_context(ctx: &Context) {
    // SAFETY: called during load with a live context; the result lives as long as the
    // module (a module with a data type is never unloaded).
    let detached = unsafe { api!(RedisModule_GetDetachedThreadSafeContext)(ctx.ctx) };
    if !detached.is_null() {
        let _ = DETACHED.set(Detached(detached));
    }
}

/// Whether `maxmemory` is set with a policy that may evict keys: then locks (volatile
/// and allkeys policies) and fence marks (allkeys policies) can be evicted.
pub fn eviction_possible() -> bool {
    let Some(detached) = DETACHED.get() else {
        return false;
    };
    // A context no command runs on: read afresh.
    Flags(context_flags::read(detached.0)).eviction_possible()
}

/// Whether `name` belongs to a slot this cluster primary does not serve now (never on a
/// server outside a cluster, nor on a replica, whose slots are its primary's).
/// `RM_Call` routes as a client command would (outside the primary's link) and refuses
/// a key of a slot another node owns, or one being migrated away and gone from here:
/// that refusal is the answer. Asked only of a deleted lock key somebody waits for or
/// observes, where a slot lost to another node (Valkey and Redis delete its keys on the
/// old owner) must not be taken for a release.
pub fn slot_served_elsewhere(ctx: &Context, name: &[u8]) -> bool {
    let flags = Flags::of(ctx);
    flags.in_cluster() && !flags.replica() && !serves_key(ctx, name)
}

fn serves_key(ctx: &Context, name: &[u8]) -> bool {
    // SAFETY: `b` takes a buffer and its length, alive for the call; the command name
    // and format are NUL-terminated; the reply, if any, is freed at once.
    unsafe {
        let reply = api!(RedisModule_Call)(
            ctx.ctx,
            c"EXISTS".as_ptr(),
            c"b".as_ptr(),
            name.as_ptr().cast::<c_char>(),
            name.len(),
        );
        if reply.is_null() {
            return false;
        }
        let refused =
            api!(RedisModule_CallReplyType)(reply) == raw::REDISMODULE_REPLY_ERROR as c_int;
        api!(RedisModule_FreeCallReply)(reply);
        !refused
    }
}
