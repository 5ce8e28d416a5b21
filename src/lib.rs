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
pub mod flagged;
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
use crate::ffi::command_table::CommandSpec;
use crate::ffi::data_type::LOCK_TYPE;
use crate::ffi::events::ServerEvent;
use crate::ffi::mark_type::MARK_TYPE;

/// The commands, in the order Redis registers them; each one's row (flags, arity, key
/// spec, ACL categories, docs) sits beside its handler in `commands/<command>.rs`. The
/// key is argument 1 (first = last = 1, step 1), which also routes it in a cluster,
/// unless the row says otherwise.
const COMMANDS: [CommandSpec; 21] = [
    acquire::SPEC,
    acquire_all::SPEC,
    once::SPEC,
    done::SPEC,
    refresh::SPEC,
    release::SPEC,
    proclaim::SPEC,
    observe::SPEC,
    fence::SPEC,
    info::SPEC,
    top::SPEC,
    apply::SPEC,
    record::SPEC,
    drop::SPEC,
    keepalive::SPEC,
    close::SPEC,
    held::SPEC,
    guard::SPEC,
    fenced::SPEC,
    mark::SPEC,
    clock::SPEC,
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
const SWITCHES: [Switch; 2] = [
    Switch {
        name: "deadlock-detection",
        value: &config::DEADLOCK_DETECTION,
        default: true,
    },
    Switch {
        name: "track-held-keys",
        value: &keyspace::held_keys::TRACKING,
        default: true,
    },
];

/// The server events the module follows, and who handles each.
const SERVER_EVENTS: [(ServerEvent, ffi::events::ServerEventHandler); 7] = [
    (ServerEvent::FlushDb, hooks::server::flushed),
    (ServerEvent::Loading, hooks::server::loaded),
    (
        ServerEvent::ReplicationRoleChanged,
        hooks::server::role_changed,
    ),
    (ServerEvent::SwapDb, hooks::server::swapped_databases),
    (ServerEvent::EventLoop, hooks::server::event_loop),
    (ServerEvent::ForkChild, hooks::server::forked),
    (ServerEvent::Config, hooks::server::config_changed),
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
    // First: the module's state is lent to this thread alone (`ffi::main_thread`).
    ffi::main_thread::adopt_this_thread();
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
