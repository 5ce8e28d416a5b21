//! Effects on a lock key and what goes with them: the write itself, its propagation to
//! replicas and the AOF, its keyspace event and its counter (`effects`); how to
//! propagate (`propagation`); the `lock.*` events the module emits (`lock_events`); and
//! the note of a lock key Redis just unlinked, to tell a lease that ran out from other
//! removals (`unlinked`); the index of sessions (`sessions`); the grants of several keys,
//! written all or none (`all_or_none`); the writes of run once (`once`); the names of
//! the lock keys held, for `LOCK.TOP` (`held_keys`). Below both the commands and the
//! blocking code.

pub mod all_or_none;
pub mod effects;
pub mod held_keys;
mod held_log;
pub mod lock_events;
pub mod once;
pub mod propagation;
pub mod sessions;
pub mod unlinked;
