//! fencelock: native distributed locks with fencing tokens for Redis.
//!
//! This file registers everything with Redis, read top-down: the command table, the
//! config table, the events the module follows, then the load sequence. Behaviour
//! lives in the folders below.
//!
//! # Layout
//!
//! | folder | role |
//! |---|---|
//! | `core/` (crate `fencelock-core`) | every rule that needs no Redis: fence clock, holdings, shared holders and modes, tokens, lock decisions, FIFO waiting, argument parsing, error texts |
//! | `src/ffi/` | the only place that touches Redis's raw API or writes `unsafe`: API check at load, command entry points, keys, replies, replication, RDB/AOF, timers, blocked clients, notifications, subscriptions, the panic guard |
//! | `src/keyspace/` | effects on a lock key (write, propagate, announce, count) and how to propagate them |
//! | `src/observing/` | clients watching a lock without taking it (`LOCK.OBSERVE`): who knows which state, what may have changed, answering them before the event loop sleeps |
//! | `src/blocking/` | waiting clients: the registry glue, blocked-client callbacks, `BLOCK` timeouts, handoff timers, the turn of a wait for several keys, deadlock detection over the live registry |
//! | `src/commands/` | one file per command: parse → decide (core) → effects → reply |
//! | `src/hooks/` | what the module does when Redis announces something: keyspace events, the command filter, server events, INFO |
//! | `src/config.rs`, `src/stats.rs`, `src/node_fence.rs`, `src/fault.rs` | config values, counters, the node's fence clock, test-only forced panics |
//!
//! A file uses what sits below it in this order, never above: `core` →
//! `stats`/`durations`/`node_fence`/`fault` → `ffi` → `observing` → `config`/`keyspace` → `blocking` →
//! `commands`/`hooks` → this file.

// The compiler holds the boundary: `unsafe` only in `ffi`.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[macro_use]
#[allow(unsafe_code)]
pub mod ffi;

pub mod blocking;
pub mod commands;
pub mod config;
pub mod durations;
pub mod fault;
pub mod hooks;
pub mod keyspace;
pub mod node_fence;
pub mod observing;
pub mod stats;

use fencelock_core::limits::{MAX_HOLDERS_LIMIT, MAX_TOKEN_LENGTH_LIMIT, MAX_WAITERS_LIMIT};
use redis_module::{redis_module, Context, NotifyEvent, RedisString, Status};

use crate::commands::{
    acquire, acquire_all, apply, clock, close, done, drop, fence, fenced, guard, held, info,
    keepalive, mark, observe, once, proclaim, record, refresh, release, top,
};
use crate::config::{Setting, Switch};
use crate::ffi::argv::entry;
use crate::ffi::command_table::{CommandSpec, Keys, ACCESS, DELETE, OW, RO, RW, UPDATE};
use crate::ffi::data_type::LOCK_TYPE;
use crate::ffi::events::ServerEvent;
use crate::ffi::mark_type::MARK_TYPE;

/// The commands. The key is argument 1 (first = last = 1, step 1), which also routes
/// them in a cluster; `LOCK.ACQUIREALL` has numkeys there and its keys after it (its
/// key spec says so, and Redis refuses keys of several slots). `LOCK.ACQUIRE`, `LOCK.REFRESH` and `LOCK.FENCED` are not
/// `deny-oom`: under `maxmemory` they refuse only what needs new memory themselves
/// (`server::out_of_memory`), so a holder keeps its lock.
const COMMANDS: [CommandSpec; 21] = [
    CommandSpec {
        name: "lock.acquire",
        entry: Some(entry::<acquire::Acquire>),
        flags: c"write blocking",
        categories: "write blocking",
        replication_form: false,
        summary:
            "Acquires a lock for ttl-ms, optionally waiting in FIFO order; returns [token, fence].",
        since: c"0.1.0",
        complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
        arity: -3,
        keys: Keys::One(RW.with(ACCESS).with(UPDATE)),
    },
    CommandSpec {
        name: "lock.acquireall",
        entry: Some(entry::<acquire_all::AcquireAll>),
        flags: c"write blocking getkeys-api",
        categories: "write blocking",
        replication_form: false,
        summary: "Acquires every key or none for ttl-ms, optionally waiting in FIFO order; returns [token, [fences]].",
        since: c"0.3.0",
        complexity: c"O(N) in the keys; a wait also checks for deadlocks, O(the waits it reaches)",
        arity: -4,
        keys: Keys::Numkeys(RW.with(ACCESS).with(UPDATE)),
    },
    CommandSpec {
        name: "lock.once",
        entry: Some(entry::<once::Once>),
        flags: c"write blocking",
        categories: "write blocking",
        replication_form: false,
        summary: "Claims the one run of a key: [token, fence] to run it, [nil, fence, result] once it is done, nil (or a FIFO wait) while it runs.",
        since: c"0.4.0",
        complexity: c"O(1) (plus the length of the result replayed)",
        arity: -5,
        keys: Keys::One(RW.with(ACCESS).with(UPDATE)),
    },
    CommandSpec {
        name: "lock.done",
        entry: Some(entry::<done::Done>),
        flags: c"write deny-oom fast",
        categories: "write fast",
        replication_form: false,
        summary: "Stores the result of the run held by token for its keep time, answering every waiting duplicate.",
        since: c"0.4.0",
        complexity: c"O(1) plus O(k) for k duplicates waiting (and the length of the result)",
        arity: 4,
        keys: Keys::One(RW.with(UPDATE)),
    },
    CommandSpec {
        name: "lock.refresh",
        entry: Some(entry::<refresh::Refresh>),
        flags: c"write fast",
        categories: "write fast",
        replication_form: false,
        summary: "Extends the lease of a lock held by token (with ADD: by ttl-ms past its end).",
        since: c"0.1.0",
        complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
        arity: -4,
        keys: Keys::One(RW.with(UPDATE)),
    },
    CommandSpec {
        name: "lock.release",
        entry: Some(entry::<release::Release>),
        flags: c"write fast",
        categories: "write fast",
        replication_form: false,
        summary: "Releases a lock held by token, handing it to the first waiter.",
        since: c"0.1.0",
        complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one, plus O(k log n) for k waiters granted",
        arity: 3,
        keys: Keys::One(RW.with(DELETE)),
    },
    CommandSpec {
        name: "lock.proclaim",
        entry: Some(entry::<proclaim::Proclaim>),
        flags: c"write deny-oom fast",
        categories: "write fast",
        replication_form: false,
        summary: "Sets the public value of the exclusive holding of token (its fence and lease stay).",
        since: c"0.3.0",
        complexity: c"O(1) (plus the length of the value)",
        arity: 4,
        keys: Keys::One(RW.with(UPDATE)),
    },
    CommandSpec {
        name: "lock.observe",
        entry: Some(entry::<observe::Observe>),
        flags: c"readonly blocking",
        categories: "read blocking",
        replication_form: false,
        summary: "Returns [fence, value] of the lock's holder once it differs from the state the caller knows, optionally waiting.",
        since: c"0.3.0",
        complexity: c"O(1); a change answers each of the key's N observers, O(N)",
        arity: -2,
        keys: Keys::One(RO.with(ACCESS)),
    },
    CommandSpec {
        name: "lock.fence",
        entry: Some(entry::<fence::Fence>),
        flags: c"readonly fast",
        categories: "read fast",
        replication_form: false,
        summary: "Returns the fence of the current holding.",
        since: c"0.1.0",
        complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
        arity: -2,
        keys: Keys::One(RO.with(ACCESS)),
    },
    CommandSpec {
        name: "lock.info",
        entry: Some(entry::<info::Info>),
        flags: c"readonly fast",
        categories: "read fast",
        replication_form: false,
        summary: "Returns whether a lock is held, its fence, remaining ttl and waiters.",
        since: c"0.1.0",
        complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
        arity: 2,
        keys: Keys::One(RO.with(ACCESS)),
    },
    CommandSpec {
        name: "lock.top",
        entry: Some(entry::<top::Top>),
        flags: c"readonly",
        categories: "read",
        replication_form: false,
        summary: "Lists the most waited-for (or longest held) locks of this server: [key, waiters, longest-wait-ms, held-ms] each.",
        since: c"0.4.0",
        complexity: c"O(N log N) in the keys held or waited for in the database",
        arity: -1,
        keys: Keys::Declared,
    },
    CommandSpec {
        name: "lock.apply",
        entry: Some(entry::<apply::Apply>),
        flags: c"write deny-oom fast",
        categories: "write fast",
        replication_form: true,
        summary: "Writes an explicit holding (the replicated form of a grant).",
        since: c"0.1.0",
        complexity: c"O(1) for an exclusive lock; O(log n) in the holders of a shared one",
        arity: -4,
        keys: Keys::One(OW.with(UPDATE)),
    },
    CommandSpec {
        name: "lock.record",
        entry: Some(entry::<record::Record>),
        flags: c"write deny-oom fast",
        categories: "write fast",
        replication_form: true,
        summary: "Writes an explicit run-once record (the replicated form of a run granted or a result stored).",
        since: c"0.4.0",
        complexity: c"O(1) (plus the length of the result)",
        arity: -7,
        keys: Keys::One(OW.with(UPDATE)),
    },
    CommandSpec {
        name: "lock.drop",
        entry: Some(entry::<drop::Drop>),
        flags: c"write fast",
        categories: "write fast",
        replication_form: true,
        summary: "Removes one holder whatever its lease (the replicated form of a shared release).",
        since: c"0.2.0",
        complexity: c"O(log n) in the holders of the shared lock",
        arity: 3,
        keys: Keys::One(RW.with(DELETE)),
    },
    // The session commands name no key: they find the session's keys themselves, and
    // check the caller's permissions for each (Redis cannot).
    CommandSpec {
        name: "lock.keepalive",
        entry: Some(entry::<keepalive::KeepAlive>),
        flags: c"write",
        categories: "write",
        replication_form: false,
        summary: "Restarts the lease of every holding of a session on this server; returns how many.",
        since: c"0.3.0",
        complexity: c"O(n) in the session's holdings here (O(h) per shared lock of h holders)",
        arity: 3,
        keys: Keys::Declared,
    },
    CommandSpec {
        name: "lock.close",
        entry: Some(entry::<close::Close>),
        flags: c"write",
        categories: "write",
        replication_form: false,
        summary: "Releases every holding of a session on this server, handing each to its queue.",
        since: c"0.3.0",
        complexity: c"O(n) in the session's holdings here, plus O(w) in all waiters",
        arity: 2,
        keys: Keys::Declared,
    },
    CommandSpec {
        name: "lock.held",
        entry: Some(entry::<held::Held>),
        flags: c"readonly",
        categories: "read",
        replication_form: false,
        summary: "Lists the holdings of a session on this server: [key, mode, fence, pttl] each.",
        since: c"0.3.0",
        complexity: c"O(n log n) in the session's holdings here",
        arity: 2,
        keys: Keys::Declared,
    },
    // The next two run another command; they declare its keys when Redis asks.
    CommandSpec {
        name: "lock.guard",
        entry: Some(entry::<guard::Guard>),
        flags: c"may-replicate getkeys-api",
        categories: "write",
        replication_form: false,
        summary: "Runs a command only while token holds the lock, atomically with the check.",
        since: c"0.2.0",
        complexity: c"O(1) for the check, plus the inner command's own",
        arity: -4,
        keys: Keys::Declared,
    },
    CommandSpec {
        name: "lock.fenced",
        entry: Some(entry::<fenced::Fenced>),
        flags: c"write getkeys-api",
        categories: "write",
        replication_form: false,
        summary: "Runs a command only with a fence at least the highest the mark admitted.",
        since: c"0.2.0",
        complexity: c"O(1) for the check, plus the inner command's own",
        arity: -4,
        keys: Keys::Declared,
    },
    CommandSpec {
        name: "lock.mark",
        entry: Some(entry::<mark::Mark>),
        flags: c"write deny-oom fast",
        categories: "write fast",
        replication_form: true,
        summary: "Raises a fence mark (the replicated form of an admission).",
        since: c"0.2.0",
        complexity: c"O(1)",
        arity: 3,
        keys: Keys::One(RW.with(UPDATE)),
    },
    CommandSpec {
        name: "lock.clock",
        entry: Some(entry::<clock::Clock>),
        flags: c"write fast",
        categories: "write fast",
        replication_form: true,
        summary: "Raises the node's fence clock and mark floor (the replicated form of both).",
        since: c"0.2.0",
        complexity: c"O(1)",
        arity: 3,
        keys: Keys::Declared,
    },
];

/// The configs, `fencelock.<name>`.
const CONFIGS: [Setting; 8] = [
    Setting {
        name: "max-ttl",
        value: &config::MAX_TTL_MS,
        default: fencelock_core::limits::DEFAULT_MAX_TTL_MS,
        min: 1,
        max: i64::MAX,
    },
    Setting {
        name: "max-waiters",
        value: &config::MAX_WAITERS,
        default: fencelock_core::limits::DEFAULT_MAX_WAITERS,
        min: 1,
        max: MAX_WAITERS_LIMIT,
    },
    Setting {
        name: "max-token-length",
        value: &config::MAX_TOKEN_LENGTH,
        default: fencelock_core::limits::DEFAULT_MAX_TOKEN_LENGTH,
        min: 1,
        max: MAX_TOKEN_LENGTH_LIMIT,
    },
    Setting {
        name: "max-holders",
        value: &config::MAX_HOLDERS,
        default: fencelock_core::limits::DEFAULT_MAX_HOLDERS,
        min: 1,
        max: MAX_HOLDERS_LIMIT,
    },
    Setting {
        name: "lock-delay",
        value: &config::LOCK_DELAY_MS,
        default: 0,
        min: 0,
        // The longest lease by default; a lower `max-ttl` caps it where it is used.
        max: fencelock_core::limits::DEFAULT_MAX_TTL_MS,
    },
    Setting {
        name: "max-keys",
        value: &config::MAX_KEYS,
        default: config::DEFAULT_MAX_KEYS,
        min: 1,
        max: config::MAX_KEYS_LIMIT,
    },
    Setting {
        name: "max-value-length",
        value: &config::MAX_VALUE_LENGTH,
        default: config::DEFAULT_MAX_VALUE_LENGTH,
        min: 0,
        max: config::MAX_VALUE_LENGTH_LIMIT,
    },
    Setting {
        name: "max-result-length",
        value: &config::MAX_RESULT_LENGTH,
        default: config::DEFAULT_MAX_RESULT_LENGTH,
        min: 0,
        max: config::MAX_RESULT_LENGTH_LIMIT,
    },
];

/// The `yes`/`no` configs, `fencelock.<name>`.
const SWITCHES: [Switch; 1] = [Switch {
    name: "deadlock-detection",
    value: &config::DEADLOCK_DETECTION,
    default: true,
}];

/// The server events the module follows, and who handles each.
const SERVER_EVENTS: [(ServerEvent, ffi::events::ServerEventHandler); 6] = [
    (ServerEvent::FlushDb, hooks::server::flushed),
    (ServerEvent::Loading, hooks::server::loaded),
    (
        ServerEvent::ReplicationRoleChanged,
        hooks::server::role_changed,
    ),
    (ServerEvent::SwapDb, hooks::server::swapped_databases),
    (ServerEvent::EventLoop, hooks::server::event_loop),
    (ServerEvent::ForkChild, hooks::server::forked),
];

/// The keyspace events the module follows: deletions, expiries, evictions and every
/// generic change (`EXPIRE`, `PERSIST`, `RENAME`, `RESTORE`, `MOVE`, …).
/// Where Redis 8.4+ trims the keys of slots it gave away, each trimmed key too (so
/// that it trims them one by one, announced, not unseen in the background).
fn keyspace_classes(ctx: &Context) -> NotifyEvent {
    NotifyEvent::GENERIC
        | NotifyEvent::EXPIRED
        | NotifyEvent::EVICTED
        | NotifyEvent::from_bits_retain(ffi::slot_migration::trimmed_keys_class(ctx))
}

/// The load sequence. Any failure refuses the module, with a log line saying why.
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    durations::init();
    let loaded = ffi::api::check(ctx)
        && config::register(ctx, args, &CONFIGS, &SWITCHES)
        && {
            ffi::config::set_options(ctx, ffi::slot_migration::module_options(ctx));
            ffi::command_table::register(ctx, &COMMANDS)
        }
        && subscribe(ctx);
    if loaded {
        keyspace::propagation::check_server(ctx);
        Status::Ok
    } else {
        Status::Err
    }
}

fn subscribe(ctx: &Context) -> bool {
    ffi::data_type::observe_unlinks(hooks::keyspace::on_unlink);
    ffi::mark_type::observe_unlinks(hooks::keyspace::on_mark_unlink);
    let mut subscribed =
        ffi::events::subscribe_keyspace(ctx, keyspace_classes(ctx), hooks::keyspace::on_event)
            && ffi::filter::register(ctx, hooks::filter::before_command)
            && ffi::info_section::register(
                ctx,
                hooks::info_section::SECTION,
                hooks::info_section::fields,
            )
            && ffi::slot_migration::follow(ctx, hooks::slot_migration::migration);
    ffi::server::keep_detached_context(ctx);
    for (event, handler) in SERVER_EVENTS {
        subscribed = subscribed && ffi::events::subscribe(ctx, event, handler);
    }
    if !subscribed {
        ctx.log_warning("fencelock: could not subscribe to the server's events");
    }
    subscribed
}

#[cfg(not(test))]
macro_rules! allocator {
    () => {
        redis_module::alloc::RedisAlloc
    };
}

#[cfg(test)]
macro_rules! allocator {
    () => {
        std::alloc::System
    };
}

/// The crate's version as Redis modules spell theirs in `MODULE LIST` (`ver`):
/// major·10000 + minor·100 + patch, so 0.2.0 is 200 and 1.4.2 is 10402.
const MODULE_VERSION: i32 = decimal(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
    + decimal(env!("CARGO_PKG_VERSION_MINOR")) * 100
    + decimal(env!("CARGO_PKG_VERSION_PATCH"));

/// Cargo's version parts are plain decimal digits; evaluated at compile time.
const fn decimal(digits: &str) -> i32 {
    let bytes = digits.as_bytes();
    let mut value = 0;
    let mut at = 0;
    while at < bytes.len() {
        value = value * 10 + (bytes[at] - b'0') as i32;
        at += 1;
    }
    value
}

redis_module! {
    name: "fencelock",
    version: MODULE_VERSION,
    allocator: (allocator!(), allocator!()),
    data_types: [LOCK_TYPE, MARK_TYPE],
    init: init,
}
