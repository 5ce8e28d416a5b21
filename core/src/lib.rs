//! fencelock-core: every rule of fencelock that needs no Redis, unit-tested with an
//! injected clock and property tests, linked into the module (`src/`).
//!
//! - `fence_clock`: the node's hybrid fence clock;
//! - `holding`: a holder's token and fence packed into one allocation, and `value`: a
//!   lock key's value, one exclusive holding or a set of `shared` holders behind one
//!   thin pointer (the only `unsafe` here, documented in those files);
//! - `mode`: exclusive, shared, or a semaphore of n;
//! - `token`: generation, validation, constant-time comparison;
//! - `lock`: what a command does to a lock (the decisions, every mode); `fence_checks`:
//!   the checks of `LOCK.GUARD` and `LOCK.FENCED`;
//! - `compared_token`: tokens that commands compare with the holder's;
//! - `fifo_queue`: one FIFO queue (of one key's waiters), and `wait_registry`: the
//!   bookkeeping of every key's queue and every wait, generic over the client handle;
//!   `owner`: whom a holding or a wait belongs to, and `deadlock`: whether a wait about
//!   to begin would close a cycle;
//! - `args`: argument parsing, with the limits passed in (`limits`);
//! - `error`: every error reply, worded exactly;
//! - `digits`: numbers as ready-made decimal digits;
//! - `slot`: Redis Cluster's hash slot of a key;
//! - `capacity`: tables give back their room once mostly empty;
//! - `session_index`: which keys may hold a session's holdings (checked on use);
//! - `once`: run once, a lock that remembers its outcome (`LOCK.ONCE`, `LOCK.DONE`);
//! - `observe`: what `LOCK.OBSERVE` reports of a lock, and when an observer hears;
//! - `top`: what `LOCK.TOP` asks for and the order of its entries;
//! - holdings read back from RDB payloads are validated in `holding`;
//! - `shared` keeps a small set's holders in a list (`shared/list.rs`) and a large one's
//!   indexed by token and lease end (`shared/index.rs`); both keep `shared/holder.rs`'s
//!   `SharedHolder` and neither imports the set back.

#![deny(unsafe_code)]

pub mod args;
pub mod capacity;
pub mod compared_token;
pub mod deadlock;
pub mod digits;
pub mod error;
pub mod fence_checks;
pub mod fence_clock;
pub mod fifo_queue;
#[allow(unsafe_code)]
pub mod holding;
pub mod limits;
pub mod lock;
pub mod lock_ref;
pub mod mode;
pub mod observe;
pub mod once;
pub mod owner;
pub mod session_index;
pub mod shared;
pub mod slot;
pub mod token;
pub mod top;
#[allow(unsafe_code)]
pub mod value;
pub mod wait_registry;
