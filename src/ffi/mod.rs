//! The only folder that touches Redis's raw module API or writes `unsafe`. Everything
//! above it works with safe types: `Context`, `RedisString`, `LockKey`, plain values.
//!
//! Named `ffi` because it is the foreign-function boundary: the raw `RedisModule_*`
//! functions are called here and nowhere else.
//!
//! Every entry point Redis calls into the module starts here (`argv` for commands,
//! `blocked`, `timers`, `events`, `filter`, `data_type`, `info_section`) and runs its
//! body inside `panic_guard`, so a panic becomes an error reply or a log line, never an abort
//! of the server. Every required API function is checked once at load (`api`). Keys are
//! opened through `open_key` (one handle, the change signal) as a lock key (`lock_key`)
//! or a mark key (`mark_key`); `getkeys` answers Redis's key-position requests;
//! `server_clock` reads the server's cached clocks; `context_flags` a context's flags,
//! once per command.

/// The Redis API function `$name`. Present by the load-time check (`api::check`); were
/// it not, the call panics, which the entry point's guard turns into an error reply.
macro_rules! api {
    ($name:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: written once while the module loads, only read afterwards.
        let function = unsafe { redis_module::raw::$name };
        match function {
            Some(function) => function,
            None => $crate::ffi::api::absent(stringify!($name)),
        }
    }};
}

/// An API function newer servers have and older ones may lack (checked at each use).
macro_rules! optional_api {
    ($name:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: written once while the module loads, only read afterwards.
        let function = unsafe { redis_module::raw::$name };
        function
    }};
}

pub mod acl;
pub mod api;
#[macro_use]
mod apply_form;
pub mod argv;
pub mod blocked;
pub mod call;
pub mod command_table;
pub mod config;
pub mod context_flags;
pub mod data_type;
pub mod events;
pub mod filter;
pub mod getkeys;
pub mod info_section;
pub mod lock_key;
pub mod main_thread;
pub mod mark_key;
pub mod mark_type;
pub mod node_state_form;
pub mod notify;
pub mod once_type;
pub mod open_key;
pub mod panic_guard;
pub mod post_jobs;
mod rdb_fields;
pub mod replicate;
pub mod reply;
pub mod server;
pub mod server_clock;
pub mod slot_migration;
mod string_bytes;
pub mod timers;
