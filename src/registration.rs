//! Load-time setup beyond the `redis_module!` table: IO-error handling for RDB loads,
//! command metadata, the command filter, and the server events the module follows
//! (flushes, `SWAPDB`, loading, role changes, the event loop going to sleep).

use std::ffi::c_int;

use redis_module::server_events::{FlushSubevent, LoadingSubevent, ServerRole};
use redis_module::{raw, Context, Status};
use redis_module_macros::{flush_event_handler, loading_event_handler, role_changed_event_handler};

use crate::blocking;
use crate::propagation;

pub fn init(ctx: &Context) -> Status {
    // SAFETY: a plain option setter on the load context.
    if let Some(set_options) = api!(RedisModule_SetModuleOptions) {
        unsafe { set_options(ctx.ctx, raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int) };
    }
    if crate::command_info::register_all(ctx) == Status::Err {
        return Status::Err;
    }
    propagation::check_server(ctx);
    subscribe(ctx, raw::REDISMODULE_EVENT_SWAPDB, Some(swapped_databases));
    subscribe(ctx, raw::REDISMODULE_EVENT_EVENTLOOP, Some(event_loop));
    if !crate::command_watch::watch(ctx) {
        ctx.log_warning("fencelock: could not install its command filter");
        return Status::Err;
    }
    Status::Ok
}

#[flush_event_handler]
fn flushed(ctx: &Context, subevent: FlushSubevent) {
    if matches!(subevent, FlushSubevent::Ended) {
        blocking::settle_all_queues(ctx);
    }
}

/// Loading an RDB or AOF can leave a replication backlog behind, and replaces every
/// key a client may be waiting for (`DEBUG RELOAD`).
#[loading_event_handler]
fn loaded(ctx: &Context, subevent: LoadingSubevent) {
    if matches!(subevent, LoadingSubevent::Ended) {
        propagation::check_server(ctx);
        blocking::settle_all_queues(ctx);
    }
}

/// Subscribes to a server event redis-module has no handler macro for. Both are
/// present on every supported server; a server without one logs it and works on.
fn subscribe(ctx: &Context, event: u64, callback: raw::RedisModuleEventCallback) {
    let Some(subscribe) = api!(RedisModule_SubscribeToServerEvent) else {
        return;
    };
    let event = raw::RedisModuleEvent {
        id: event,
        dataver: 1,
    };
    // SAFETY: a static callback, subscribed once during load.
    if unsafe { subscribe(ctx.ctx, event, callback) } != raw::REDISMODULE_OK as c_int {
        ctx.log_warning(&format!(
            "fencelock: server event {} is not available",
            event.id
        ));
    }
}

/// `SWAPDB` exchanged two databases under the waiters' feet: the key each queue waits
/// for may now be free, or held with another deadline.
unsafe extern "C" fn swapped_databases(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut std::ffi::c_void,
) {
    blocking::settle_all_queues(&Context::new(ctx));
}

/// Before the server sleeps, the command that unlinked a lock is certainly over.
unsafe extern "C" fn event_loop(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut std::ffi::c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP {
        crate::events::forget_unlinked_lock();
    }
}

/// A server that was ever a replica keeps a backlog for its own replicas.
#[role_changed_event_handler]
fn role_changed(_ctx: &Context, role: ServerRole) {
    if matches!(role, ServerRole::Replica) {
        propagation::replication_started();
    }
}
