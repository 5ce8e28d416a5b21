//! The `lock.*` keyspace events fencelock emits (module class, `notify-keyspace-events`
//! flag `d`).

use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::ffi::notify;

pub const ACQUIRED: &CStr = c"lock.acquired";
pub const REFRESHED: &CStr = c"lock.refreshed";
pub const RELEASED: &CStr = c"lock.released";
pub const EXPIRED: &CStr = c"lock.expired";
/// The server evicted a lock key under `maxmemory`: its holders lost it.
pub const EVICTED: &CStr = c"lock.evicted";
pub const HANDOFF: &CStr = c"lock.handoff";
/// An exclusive holder's public value changed (`LOCK.PROCLAIM`).
pub const PROCLAIMED: &CStr = c"lock.proclaimed";
/// A run-once claim stored its result (`LOCK.DONE`).
pub const DONE: &CStr = c"lock.done";
/// A wait for the key was refused: it would have closed a cycle of waits.
pub const DEADLOCK: &CStr = c"lock.deadlock";
/// A fence mark rose (`LOCK.FENCED` admitted a higher fence).
pub const MARK_RAISED: &CStr = c"mark.raised";
/// The server evicted a fence mark under `maxmemory`: the mark floor holds its fence.
pub const MARK_EVICTED: &CStr = c"mark.evicted";
/// A fence mark given an expiry by hand expired: the mark floor holds its fence.
pub const MARK_EXPIRED: &CStr = c"mark.expired";

/// Emits `event` for `key`.
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    notify::module_event(ctx, event, key);
}
