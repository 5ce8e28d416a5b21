//! fencelock's development kit, shared by the integration tests (`tests/`) and the
//! benchmark (`bench/`); never part of the module.
//!
//! - `paths`: which `redis-server` binary and which built modules to use (fencelock's,
//!   and the benchmark's floor module);
//! - `ports`: free loopback ports, below the ephemeral range, with their cluster bus
//!   ports free too;
//! - `process`: child processes that die with the test process, killed on drop;
//! - `server`: a real `redis-server` with the module loaded, in its own temporary
//!   directory, killed on drop (and started again on another port when its own was
//!   taken);
//! - `proxy`: a loopback TCP link that a test can cut, delay and heal (partitions);
//! - `sentinel`: a real Redis Sentinel watching one primary;
//! - `resp`: the one RESP codec (encoder, incremental parser, blocking connections);
//! - `locks`: small helpers for the lock commands (grants that must happen, grant
//!   replies off the wire, expiries) and for waiting on a condition;
//! - `info`: fields of `INFO` sections over either kind of connection (`used_memory`);
//! - `persistence`: the AOF round trip (write, rewrite, kill, restart, read back);
//! - `migration`: a key's slot and atomic slot migration (Valkey 9) between cluster nodes, for tests
//!   that move a slot.

pub mod info;
pub mod locks;
pub mod migration;
pub mod paths;
pub mod persistence;
pub mod ports;
pub mod process;
pub mod proxy;
pub mod resp;
pub mod sentinel;
pub mod server;

pub use info::{info_field, memory_beyond_clients, used_memory, InfoSource};
pub use locks::*;
pub use migration::{has_atomic_migration, migration_end, owner_seen_by, slot_of, start_migration};
pub use paths::{floor_module_path, module_path, server_binary};
pub use persistence::{aof_always, aof_round_trip, rewrite_aof, Rewrite};
pub use ports::free_port;
pub use process::Guarded;
pub use proxy::{LinkState, Proxy};
pub use redis::{cmd, Connection, Value};
pub use sentinel::{Sentinel, Timing as SentinelTiming, SERVICE};
pub use server::{signal_process, Options, Server};
pub use tempfile;
