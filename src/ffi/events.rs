//! Subscriptions to what the server announces: server events (flushes, loading, role
//! changes, `SWAPDB`, the event loop going to sleep, a forked child) and keyspace events. Redis passes
//! no user data to these callbacks, so each handler is kept in a static set at load;
//! every call runs inside the guard.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use redis_module::{raw, Context, NotifyEvent};

use super::panic_guard;
use super::string_bytes::bytes_of;

/// The server events the module follows.
#[derive(Clone, Copy, Debug)]
pub enum ServerEvent {
    FlushDb,
    Loading,
    ReplicationRoleChanged,
    SwapDb,
    EventLoop,
    ForkChild,
    /// `CONFIG SET` changed configs (Redis ≥ 7.0).
    Config,
}

const EVENTS: usize = 7;

impl ServerEvent {
    fn id(self) -> u64 {
        match self {
            ServerEvent::FlushDb => raw::REDISMODULE_EVENT_FLUSHDB,
            ServerEvent::Loading => raw::REDISMODULE_EVENT_LOADING,
            ServerEvent::ReplicationRoleChanged => raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            ServerEvent::SwapDb => raw::REDISMODULE_EVENT_SWAPDB,
            ServerEvent::EventLoop => raw::REDISMODULE_EVENT_EVENTLOOP,
            ServerEvent::ForkChild => raw::REDISMODULE_EVENT_FORK_CHILD,
            ServerEvent::Config => raw::REDISMODULE_EVENT_CONFIG,
        }
    }

    fn slot(self) -> usize {
        self as usize
    }

    fn from_id(id: u64) -> Option<ServerEvent> {
        [
            ServerEvent::FlushDb,
            ServerEvent::Loading,
            ServerEvent::ReplicationRoleChanged,
            ServerEvent::SwapDb,
            ServerEvent::EventLoop,
            ServerEvent::ForkChild,
            ServerEvent::Config,
        ]
        .into_iter()
        .find(|event| event.id() == id)
    }
}

/// Subevents the handlers compare against.
pub const FLUSH_ENDED: u64 = raw::REDISMODULE_SUBEVENT_FLUSHDB_END;
pub const LOADING_ENDED: u64 = raw::REDISMODULE_SUBEVENT_LOADING_ENDED;
pub const LOADING_FAILED: u64 = raw::REDISMODULE_SUBEVENT_LOADING_FAILED;
pub const BECAME_REPLICA: u64 = raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA;
pub const BEFORE_SLEEP: u64 = raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP;
pub const CHILD_BORN: u64 = raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN;

/// What an event says beyond its subevent.
#[derive(Clone, Copy, Debug, Default)]
pub struct EventData {
    /// `SWAPDB`: the two databases exchanged.
    pub swapped: Option<(i32, i32)>,
    /// A flush: the database flushed, `None` for all of them.
    pub flushed: Option<i32>,
}

/// A server event handler: gets the subevent and the event's data.
pub type ServerEventHandler = fn(&Context, u64, EventData);

static SERVER_HANDLERS: [OnceLock<ServerEventHandler>; EVENTS] =
    [const { OnceLock::new() }; EVENTS];

/// Calls `handler` on every `event`; false if the server does not offer it.
pub fn subscribe(ctx: &Context, event: ServerEvent, handler: ServerEventHandler) -> bool {
    let Some(slot) = SERVER_HANDLERS.get(event.slot()) else {
        return false;
    };
    if slot.set(handler).is_err() {
        return false;
    }
    let event = raw::RedisModuleEvent {
        id: event.id(),
        dataver: 1,
    };
    // SAFETY: a static callback, subscribed once during load.
    let status =
        unsafe { api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(server_event)) };
    status == raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn server_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let kind = ServerEvent::from_id(event.id);
    let handler = kind
        .and_then(|event| SERVER_HANDLERS.get(event.slot()))
        .and_then(OnceLock::get);
    let Some(handler) = handler else {
        return;
    };
    let swapped = match kind {
        Some(ServerEvent::SwapDb) if !data.is_null() => {
            // SAFETY: Redis passes a RedisModuleSwapDbInfo with the SWAPDB event.
            let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
            Some((info.dbnum_first, info.dbnum_second))
        }
        _ => None,
    };
    let flushed = match kind {
        Some(ServerEvent::FlushDb) if !data.is_null() => {
            // SAFETY: Redis passes a RedisModuleFlushInfo with the flush event.
            let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfo>() };
            (info.dbnum >= 0).then_some(info.dbnum)
        }
        _ => None,
    };
    panic_guard::callback("a server event", (), || {
        handler(&Context::new(ctx), subevent, EventData { swapped, flushed })
    });
}

/// A keyspace event handler: gets the event name and the key.
pub type KeyspaceHandler = fn(&Context, &str, &[u8]);

static KEYSPACE_HANDLER: OnceLock<KeyspaceHandler> = OnceLock::new();

/// Calls `handler` on every keyspace event of the `classes`; false on failure.
pub fn subscribe_keyspace(ctx: &Context, classes: NotifyEvent, handler: KeyspaceHandler) -> bool {
    if KEYSPACE_HANDLER.set(handler).is_err() {
        return false;
    }
    // SAFETY: a static callback, subscribed once during load.
    let status = unsafe {
        api!(RedisModule_SubscribeToKeyspaceEvents)(ctx.ctx, classes.bits(), Some(keyspace_event))
    };
    status == raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    _class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    let Some(handler) = KEYSPACE_HANDLER.get() else {
        return raw::REDISMODULE_OK as c_int;
    };
    if event.is_null() || key.is_null() {
        return raw::REDISMODULE_OK as c_int;
    }
    // SAFETY: Redis passes a C string event name and a live key string for the call.
    let event = unsafe { CStr::from_ptr(event) }
        .to_str()
        .unwrap_or_default();
    // SAFETY: the key string lives for the call.
    let name = unsafe { bytes_of(key) };
    panic_guard::callback("a keyspace event", (), || {
        handler(&Context::new(ctx), event, name);
    });
    raw::REDISMODULE_OK as c_int
}
