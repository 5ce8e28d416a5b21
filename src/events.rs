//! Keyspace events: the `lock.*` notifications fencelock emits, and what it learns from
//! the events Redis emits about lock keys (a lease expired, a key was deleted).
//!
//! Redis tells a data type that one of its keys is being unlinked (`unlink2`) just
//! before it announces *why* (`expired`, `del`, `evicted`). We note the unlinked lock
//! and match it against the next announcement, which is how an expired lease is told
//! apart from an expired key of another type: by then the key is already gone.

use std::cell::RefCell;
use std::ffi::CStr;

use redis_module::{raw, Context, NotifyEvent, RedisString};

use crate::stats;

pub const ACQUIRED: &CStr = c"lock.acquired";
pub const REFRESHED: &CStr = c"lock.refreshed";
pub const RELEASED: &CStr = c"lock.released";
pub const EXPIRED: &CStr = c"lock.expired";
pub const HANDOFF: &CStr = c"lock.handoff";

/// Emits a module-class keyspace event (`notify-keyspace-events` flag `d`).
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    if let Some(notify) = api!(RedisModule_NotifyKeyspaceEvent) {
        // SAFETY: a static event name and a live key string on a live context.
        unsafe {
            notify(
                ctx.ctx,
                NotifyEvent::MODULE.bits(),
                event.as_ptr(),
                key.inner,
            )
        };
    }
}

/// The lock key most recently unlinked, as (db, name). The buffer is reused so that
/// noting a deletion does not allocate on every release.
struct Unlinked {
    noted: bool,
    db: i32,
    name: Vec<u8>,
}

thread_local! {
    static LAST_UNLINKED: RefCell<Unlinked> = const {
        RefCell::new(Unlinked { noted: false, db: 0, name: Vec::new() })
    };
}

/// Called from the data type's `unlink2`: remember which lock key is going away.
///
/// # Safety
/// `ctx` must be the key-operation context Redis passed to `unlink2`.
pub unsafe fn note_unlinked_lock(ctx: *mut raw::RedisModuleKeyOptCtx) {
    let (Some(key_name), Some(db_of)) = (
        api!(RedisModule_GetKeyNameFromOptCtx),
        api!(RedisModule_GetDbIdFromOptCtx),
    ) else {
        return;
    };
    let name = key_name(ctx);
    if name.is_null() {
        return;
    }
    let name = RedisString::string_as_slice(name.cast_mut());
    let db = db_of(ctx);
    LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        last.noted = true;
        last.db = db;
        last.name.clear();
        last.name.extend_from_slice(name);
    });
}

/// Our own deletions announce themselves; drop the note so it cannot be mistaken later.
pub fn forget_unlinked_lock() {
    LAST_UNLINKED.with(|last| last.borrow_mut().noted = false);
}

/// True when the key Redis just announced is the lock key it just unlinked.
fn was_lock(db: i32, name: &[u8]) -> bool {
    LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        let matched = last.noted && last.db == db && last.name == name;
        last.noted = false;
        matched
    })
}

/// Subscriber for Redis's generic, expired and evicted keyspace events.
pub fn on_keyspace_event(ctx: &Context, _class: NotifyEvent, event: &str, name: &[u8]) {
    let db = crate::server_state::selected_db(ctx);
    let was_lock = was_lock(db, name);
    if event == "expired" && was_lock {
        stats::EXPIRED.bump();
        notify(ctx, EXPIRED, &RedisString::create_from_slice(ctx.ctx, name));
    }
    // Keys nobody waits for need nothing more: the common case stays cheap.
    if !crate::blocking::anyone_waiting() {
        return;
    }
    // Any other change to a waited-for key (gone, a new deadline from PEXPIRE or
    // PERSIST, a new value from RESTORE, RENAME or COPY) re-settles its queue.
    if event == "del" && crate::command_watch::running_migrate() {
        crate::blocking::key_moved(ctx, db, name);
    } else {
        crate::blocking::key_changed(ctx, db, name);
    }
}
