//! The command layer: one file per command. Each parses argv into a typed request,
//! opens the key, asks the core what happens, applies and propagates the effect
//! (`keyspace::effects`), and replies. What several commands share and is no command
//! itself is in `support`.

pub mod acquire;
pub mod acquire_all;
pub mod apply;
pub mod clock;
pub mod close;
pub mod done;
pub mod drop;
pub mod fence;
pub mod fenced;
pub mod guard;
pub mod held;
pub mod info;
pub mod keepalive;
pub mod mark;
pub mod observe;
pub mod once;
pub mod proclaim;
pub mod record;
pub mod refresh;
pub mod release;
pub mod support;
pub mod top;
