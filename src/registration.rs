//! Load-time setup beyond the `redis_module!` table: IO-error handling for RDB loads,
//! command metadata, the command filter, and the server events the module follows
//! (flushes, loading, role changes).

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
    if !crate::command_watch::watch(ctx) {
        ctx.log_warning("fencelock: could not install its command filter");
        return Status::Err;
    }
    Status::Ok
}

#[flush_event_handler]
fn flushed(ctx: &Context, subevent: FlushSubevent) {
    if matches!(subevent, FlushSubevent::Ended) {
        blocking::all_keys_vacated(ctx);
    }
}

/// Loading an RDB or AOF can leave a replication backlog behind.
#[loading_event_handler]
fn loaded(ctx: &Context, subevent: LoadingSubevent) {
    if matches!(subevent, LoadingSubevent::Ended) {
        propagation::check_server(ctx);
    }
}

/// A server that was ever a replica keeps a backlog for its own replicas.
#[role_changed_event_handler]
fn role_changed(_ctx: &Context, role: ServerRole) {
    if matches!(role, ServerRole::Replica) {
        propagation::replication_started();
    }
}
