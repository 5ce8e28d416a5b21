//! fencelock: native distributed locks with fencing tokens for Redis.
//!
//! This file only registers things with Redis: the data type, the commands and their
//! flags, ACL categories where the server has them, configs, keyspace and server event
//! subscriptions, and the INFO section. Behaviour lives in the modules below.

/// Reads one of Redis's module API function pointers. redis-module exposes them as
/// `static mut`s, written once while the module loads and only read afterwards.
macro_rules! api {
    ($name:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: written once during module load, before any command can run.
        let function = unsafe { redis_module::raw::$name };
        function
    }};
}

pub mod blocking;
pub mod command_info;
pub mod command_watch;
pub mod commands;
pub mod config;
pub mod data_type;
pub mod dispatch;
pub mod events;
pub mod fence;
pub mod holding;
pub mod info_section;
pub mod limits;
pub mod lock;
pub mod node_fence;
pub mod propagation;
pub mod registration;
pub mod replicate;
pub mod server_state;
pub mod stats;
pub mod store;
pub mod token;
pub mod wait_queue;

use redis_module::{redis_module, Context, RedisString, Status};

use crate::data_type::LOCK_TYPE;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    if config::register(ctx, args) == Status::Err {
        return Status::Err;
    }
    registration::init(ctx)
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

redis_module! {
    name: "fencelock",
    version: 1,
    allocator: (allocator!(), allocator!()),
    data_types: [LOCK_TYPE],
    init: init,
    event_handlers: [
        [@GENERIC @EXPIRED @EVICTED: events::on_keyspace_event],
    ],
}
