//! Atomic slot migration, as each server offers it: the module's declaration that it
//! handles it, and the server's events about slots leaving or arriving, turned into one
//! `Migration` for the layer above.
//!
//! - **Valkey 9** refuses `CLUSTER MIGRATESLOTS` for the whole cluster while a loaded
//!   module has not set the module option for it (bit `1 << 5`). The option is set only
//!   where the server says it knows it (`GetModuleOptionsAll`) and calls itself Valkey:
//!   the same bit could mean something else on another server. Its event (id 19) says
//!   when an import or an export starts, is aborted, or completes.
//! - **Redis 8.4+** needs no declaration. Its events (ids 18 and 19, which on Valkey are
//!   other events: hence the check of the server's name) say the same of a migration
//!   and of the trimming of keys a node gave away; it trims actively, one keyspace
//!   event each, when a module subscribes to `KEY_TRIMMED` (which the layer above does
//!   where `trimmed_keys_class` says so), and it lets a module add commands to the
//!   stream a migrating node sends (`ClusterPropagateForSlotMigration`).
//!
//! Older servers (Redis 7.0, 8.2) have neither: nothing is declared or followed.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use fencelock_core::digits::{digits, DIGITS};
use redis_module::{raw, Context};

use super::panic_guard;

/// An inclusive range of hash slots.
pub type SlotRange = (u16, u16);

/// What the server said about a migration of the slots given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migration {
    /// This node began sending the slots to another (still their owner).
    ExportStarted(Vec<SlotRange>),
    /// The other node owns the slots now; this one no longer serves them.
    Exported(Vec<SlotRange>),
    /// The export ended without moving the slots: this node still owns them.
    ExportFailed(Vec<SlotRange>),
    /// This node began receiving the slots.
    ImportStarted(Vec<SlotRange>),
    /// This node owns the slots now.
    Imported(Vec<SlotRange>),
    /// The import ended without moving the slots: what arrived of them goes.
    ImportFailed(Vec<SlotRange>),
    /// Keys of slots given away are being (or were) removed here.
    Trimming(Vec<SlotRange>),
    Trimmed(Vec<SlotRange>),
    /// Redis 8.4+: the moment to add the module's own commands to the migration's
    /// stream (`propagate_node_state`).
    AddToStream,
}

/// Which kind of atomic slot migration this server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    None,
    Valkey,
    Redis,
}

pub type MigrationHandler = fn(&Context, Migration);

static KIND: OnceLock<Kind> = OnceLock::new();
static HANDLER: OnceLock<MigrationHandler> = OnceLock::new();

/// Valkey's module option: the module handles atomic slot migration.
const VALKEY_HANDLES_SLOT_MIGRATION: c_int = 1 << 5;
/// Valkey's event id and subevents.
const VALKEY_EVENT: u64 = 19;
const VALKEY_IMPORT_STARTED: u64 = 0;
const VALKEY_EXPORT_STARTED: u64 = 1;
const VALKEY_IMPORT_ABORTED: u64 = 2;
const VALKEY_EXPORT_ABORTED: u64 = 3;
const VALKEY_IMPORT_COMPLETED: u64 = 4;
const VALKEY_EXPORT_COMPLETED: u64 = 5;

/// Valkey's event data (`ValkeyModuleAtomicSlotMigrationInfoV1`); the first two fields
/// are read only for their place in the layout.
#[repr(C)]
#[allow(dead_code)]
struct ValkeyInfo {
    version: u64,
    job_name: [c_char; 41],
    slot_ranges: *const ValkeySlotRange,
    num_slot_ranges: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ValkeySlotRange {
    start: c_int,
    end: c_int,
}

/// The kind of migration this server runs, decided once at load.
pub fn kind(ctx: &Context) -> Kind {
    *KIND.get_or_init(|| {
        if optional_api!(RedisModule_ClusterPropagateForSlotMigration).is_some() {
            Kind::Redis
        } else if super::server::is_valkey(ctx) && valkey_knows_the_option() {
            Kind::Valkey
        } else {
            Kind::None
        }
    })
}

fn valkey_knows_the_option() -> bool {
    optional_api!(RedisModule_GetModuleOptionsAll).is_some_and(|all| {
        // SAFETY: a plain query of the options this server knows.
        (unsafe { all() } & VALKEY_HANDLES_SLOT_MIGRATION) != 0
    })
}

/// The module options to add for this server's slot migration (none but on Valkey).
pub fn module_options(ctx: &Context) -> c_int {
    match kind(ctx) {
        Kind::Valkey => VALKEY_HANDLES_SLOT_MIGRATION,
        Kind::None | Kind::Redis => 0,
    }
}

/// The keyspace event class that makes Redis 8.4+ trim keys one at a time, announcing
/// each (instead of freeing them in the background, unseen); none elsewhere.
pub fn trimmed_keys_class(ctx: &Context) -> c_int {
    match kind(ctx) {
        Kind::Redis => raw::REDISMODULE_NOTIFY_KEY_TRIMMED as c_int,
        Kind::None | Kind::Valkey => 0,
    }
}

/// Calls `handler` on every migration event this server has; true also where it has
/// none (older servers), false if subscribing failed.
pub fn follow(ctx: &Context, handler: MigrationHandler) -> bool {
    if HANDLER.set(handler).is_err() {
        return false;
    }
    let ids: &[u64] = match kind(ctx) {
        Kind::None => &[],
        Kind::Valkey => &[VALKEY_EVENT],
        Kind::Redis => &[
            raw::REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION,
            raw::REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION_TRIM,
        ],
    };
    ids.iter().all(|&id| {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: a static callback, subscribed once during load.
        let status =
            unsafe { api!(RedisModule_SubscribeToServerEvent)(ctx.ctx, event, Some(on_event)) };
        status == raw::REDISMODULE_OK as c_int
    })
}

unsafe extern "C" fn on_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let (Some(handler), Some(kind)) = (HANDLER.get(), KIND.get()) else {
        return;
    };
    panic_guard::callback("a slot migration event", (), || {
        // SAFETY: the server passes the event's own data, live for the call.
        let migration = unsafe {
            match kind {
                Kind::Valkey => valkey_migration(subevent, data),
                Kind::Redis => redis_migration(event.id, subevent, data),
                Kind::None => None,
            }
        };
        if let Some(migration) = migration {
            handler(&Context::new(ctx), migration);
        }
    });
}

/// # Safety
/// `data` is null or Valkey's migration info for the call.
unsafe fn valkey_migration(subevent: u64, data: *mut c_void) -> Option<Migration> {
    let slots = if data.is_null() {
        Vec::new()
    } else {
        // SAFETY: by the caller.
        let info = unsafe { &*data.cast::<ValkeyInfo>() };
        let count = usize::try_from(info.num_slot_ranges).unwrap_or(0);
        if info.slot_ranges.is_null() || count == 0 {
            Vec::new()
        } else {
            // SAFETY: the server's array of `count` ranges, live for the call.
            unsafe { std::slice::from_raw_parts(info.slot_ranges, count) }
                .iter()
                .filter_map(|range| {
                    Some((
                        u16::try_from(range.start).ok()?,
                        u16::try_from(range.end).ok()?,
                    ))
                })
                .collect()
        }
    };
    Some(match subevent {
        VALKEY_IMPORT_STARTED => Migration::ImportStarted(slots),
        VALKEY_EXPORT_STARTED => Migration::ExportStarted(slots),
        VALKEY_IMPORT_ABORTED => Migration::ImportFailed(slots),
        VALKEY_EXPORT_ABORTED => Migration::ExportFailed(slots),
        VALKEY_IMPORT_COMPLETED => Migration::Imported(slots),
        VALKEY_EXPORT_COMPLETED => Migration::Exported(slots),
        _ => return None,
    })
}

/// # Safety
/// `data` is null or Redis's migration (or trim) info for the event `id`.
unsafe fn redis_migration(id: u64, subevent: u64, data: *mut c_void) -> Option<Migration> {
    let migration = id == raw::REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION;
    let array = if data.is_null() {
        std::ptr::null()
    } else if migration {
        // SAFETY: by the caller.
        unsafe { (*data.cast::<raw::RedisModuleClusterSlotMigrationInfo>()).slots }
    } else {
        // SAFETY: by the caller.
        unsafe { (*data.cast::<raw::RedisModuleClusterSlotMigrationTrimInfo>()).slots }
    };
    // SAFETY: null or the server's array, live for the call.
    let slots = unsafe { redis_ranges(array) };
    use raw::*;
    Some(if migration {
        match subevent {
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_IMPORT_STARTED => {
                Migration::ImportStarted(slots)
            }
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_IMPORT_FAILED => {
                Migration::ImportFailed(slots)
            }
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_IMPORT_COMPLETED => {
                Migration::Imported(slots)
            }
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_STARTED => {
                Migration::ExportStarted(slots)
            }
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_FAILED => {
                Migration::ExportFailed(slots)
            }
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_COMPLETED => {
                Migration::Exported(slots)
            }
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_MODULE_PROPAGATE => {
                Migration::AddToStream
            }
            _ => return None,
        }
    } else {
        match subevent {
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_TRIM_STARTED => Migration::Trimming(slots),
            REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_TRIM_COMPLETED => Migration::Trimmed(slots),
            // Background trimming frees keys unseen; subscribing to `KEY_TRIMMED`
            // asks for the active kind, announced key by key.
            _ => return None,
        }
    })
}

/// # Safety
/// `array` is null or a live `RedisModuleSlotRangeArray`.
unsafe fn redis_ranges(array: *const raw::RedisModuleSlotRangeArray) -> Vec<SlotRange> {
    if array.is_null() {
        return Vec::new();
    }
    // SAFETY: by the caller; `ranges` holds `num_ranges` entries.
    unsafe {
        let count = usize::try_from((*array).num_ranges).unwrap_or(0);
        (*array)
            .ranges
            .as_slice(count)
            .iter()
            .map(|range| (range.start, range.end))
            .collect()
    }
}

/// Redis 8.4+: adds `LOCK.CLOCK last-fence mark-floor` to the migration's stream, so the
/// target's fence clock ends at least where this node's is (past every fence it sends).
pub fn propagate_node_state(ctx: &Context, last_fence: u64, mark_floor: u64) -> bool {
    let Some(propagate) = optional_api!(RedisModule_ClusterPropagateForSlotMigration) else {
        return false;
    };
    let (mut last_digits, mut floor_digits) = ([0u8; DIGITS], [0u8; DIGITS]);
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let last = digits(as_i64(last_fence), &mut last_digits);
    let floor = digits(as_i64(mark_floor), &mut floor_digits);
    // SAFETY: the format "bb" matches two buffers, each with its length.
    let status = unsafe {
        propagate(
            ctx.ctx,
            c"LOCK.CLOCK".as_ptr(),
            c"bb".as_ptr(),
            last.as_ptr().cast::<c_char>(),
            last.len(),
            floor.as_ptr().cast::<c_char>(),
            floor.len(),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}
