//! The `fencelock` module data type: how a held lock is saved, loaded, rewritten into
//! the AOF, digested, measured and freed, plus the fence clock's RDB aux field.
//!
//! RDB layout, encver 3: a kind (unsigned: 0 exclusive, 1 shared, 2 a run-once record,
//! laid out in `once_type`), then for an exclusive
//! lock its holding; for shared holders the limit (unsigned, 0 for plain `SHARED`), the
//! number of holders, and per holder its holding and deadline (Unix ms, signed). A
//! holding is its token (string buffer), fence (unsigned), session (string buffer,
//! empty for none), lock-delay (unsigned ms), with a lock-delay an exclusive holding's
//! lease end (signed Unix ms; the key's expiry is later by the delay), and its public
//! value (string buffer, empty for none). Encver 2 (before values) is the same without
//! the value; encver 1 (before sessions) with holdings of token and fence alone; encver
//! 0 (before shared holders) is an exclusive lock's token and fence alone. All still
//! load. Aux field (before the
//! keyspace): the node's last fence, the same in both; after the keyspace, once a fence
//! mark was evicted: the floor of evicted marks. Loading validates everything and,
//! as the module handles IO errors itself, a truncated or corrupt payload fails the load
//! instead of aborting the server.
//!
//! Every callback runs inside the guard. `free` may run on Redis's lazy-free thread: it
//! touches nothing but the value, the allocator and an atomic gauge.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use fencelock_core::holding::{Extras, Holding};
use fencelock_core::mode::Mode;
use fencelock_core::once::OnceRecord;
use fencelock_core::shared::SharedHolders;
use fencelock_core::value::{LockRef, LockValue};
use redis_module::{native_types::RedisType, raw};

use super::apply_form::ApplyForm;
use super::main_thread::MainThread;
use super::once_type;
use super::rdb_fields::{
    digest_holding, digest_number, load_holding, load_signed, load_unsigned, save_holding,
    save_unsigned, Carries,
};
use super::string_bytes::bytes_of;
use super::{node_state_form, panic_guard};
use crate::node_fence;
use crate::stats;

/// Bumped when the RDB layout changes; older encodings stay loadable.
const ENCODING_VERSION: i32 = 3;
/// The layout before values: holdings with sessions and lock-delays.
const BEFORE_VALUES_VERSION: i32 = 2;
/// The layout before sessions: holdings of token and fence.
const BEFORE_SESSIONS_VERSION: i32 = 1;
/// The layout before shared holders: an exclusive holding only.
const EXCLUSIVE_ONLY_VERSION: i32 = 0;

/// The kinds of value in encver 1 and later.
const KIND_EXCLUSIVE: u64 = 0;
const KIND_SHARED: u64 = 1;
const KIND_ONCE: u64 = 2;

/// A data type's callbacks, none set: each type fills in the ones it has.
pub(super) const NO_METHODS: raw::RedisModuleTypeMethods = raw::RedisModuleTypeMethods {
    version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
    rdb_load: None,
    rdb_save: None,
    aof_rewrite: None,
    mem_usage: None,
    digest: None,
    free: None,
    aux_load: None,
    aux_save: None,
    aux_save2: None,
    aux_save_triggers: 0,
    free_effort: None,
    unlink: None,
    copy: None,
    defrag: None,
    copy2: None,
    free_effort2: None,
    mem_usage2: None,
    unlink2: None,
};

pub static LOCK_TYPE: RedisType = RedisType::new(
    "fencelock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save2: Some(aux_save2),
        aux_save_triggers: (raw::REDISMODULE_AUX_BEFORE_RDB | raw::REDISMODULE_AUX_AFTER_RDB)
            as c_int,
        unlink2: Some(unlink2),
        ..NO_METHODS
    },
);

/// Called with the database, name and lock of every lock key Redis unlinks (deletion,
/// expiry, eviction, overwrite), before it announces why.
pub type UnlinkObserver = fn(i32, &[u8], LockRef);

static UNLINK_OBSERVER: OnceLock<UnlinkObserver> = OnceLock::new();

/// Lock keys as (db, name).
pub type LockNames = Vec<(i32, Vec<u8>)>;

/// While the server loads a file or a full sync: the shared locks and the locks with
/// sessions loaded, whose holders' lease ends the module must start to follow and whose
/// sessions it must index.
static LOADED_SHARED: MainThread<RefCell<Option<LockNames>>> =
    MainThread::new(|| RefCell::new(None));
/// While the server loads: every lock key loaded (the keys `LOCK.TOP` follows).
static LOADED_ANY: MainThread<RefCell<Option<LockNames>>> = MainThread::new(|| RefCell::new(None));

/// A load begins: note the shared locks and session locks it brings (`RESTORE`,
/// outside a load, is followed through its keyspace event instead).
pub fn loading_started() {
    LOADED_SHARED.with(|loaded| *loaded.borrow_mut() = Some(Vec::new()));
    LOADED_ANY.with(|loaded| *loaded.borrow_mut() = Some(Vec::new()));
}

/// The load is over (or failed): every lock key it brought.
pub fn take_loaded_any() -> LockNames {
    LOADED_ANY.with(|loaded| loaded.borrow_mut().take().unwrap_or_default())
}

/// The load is over: the shared locks and session locks it brought.
pub fn take_loaded() -> LockNames {
    LOADED_SHARED.with(|loaded| loaded.borrow_mut().take().unwrap_or_default())
}

/// Notes the key being loaded in `list`, if a load is noting.
fn note_loaded_in(
    list: &'static MainThread<RefCell<Option<LockNames>>>,
    rdb: *mut raw::RedisModuleIO,
) {
    let (Some(key_name), Some(db_id)) = (
        optional_api!(RedisModule_GetKeyNameFromIO),
        optional_api!(RedisModule_GetDbIdFromIO),
    ) else {
        return;
    };
    // SAFETY: the IO handle Redis passed to the load; the name lives for the call.
    let (name, db) = unsafe { (key_name(rdb), db_id(rdb)) };
    if name.is_null() {
        return;
    }
    // SAFETY: the key string lives for the call.
    let name = unsafe { bytes_of(name) };
    list.with(|loaded| {
        if let Some(noted) = loaded.borrow_mut().as_mut() {
            noted.push((db, name.to_vec()));
        }
    });
}

fn note_loaded(rdb: *mut raw::RedisModuleIO) {
    note_loaded_in(&LOADED_SHARED, rdb);
}

/// Sets the observer of unlinked lock keys (once, at load).
pub fn observe_unlinks(observer: UnlinkObserver) {
    let _ = UNLINK_OBSERVER.set(observer);
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    panic_guard::callback("RDB load", std::ptr::null_mut(), || {
        let value = match encver {
            EXCLUSIVE_ONLY_VERSION => {
                load_holding(rdb, Carries::TokenAndFence).map(LockValue::Exclusive)
            }
            BEFORE_SESSIONS_VERSION => load_value(rdb, Carries::TokenAndFence),
            BEFORE_VALUES_VERSION => load_value(rdb, Carries::SessionAndDelay),
            ENCODING_VERSION => load_value(rdb, Carries::Value),
            _ => None,
        };
        value.map_or(std::ptr::null_mut(), |value| {
            note_loaded_in(&LOADED_ANY, rdb);
            if matches!(value, LockValue::Shared(_)) || has_session(&value) {
                note_loaded(rdb);
            }
            stats::LIVE_LOCKS.up();
            if once_type::is_done_record(&value) {
                stats::ONCE_DONE_RECORDS.up();
            }
            value.into_raw().cast()
        })
    })
}

/// Whether any holding of a value belongs to a session.
fn has_session(value: &LockValue) -> bool {
    match value {
        LockValue::Exclusive(holding) => holding.has_session(),
        LockValue::Shared(set) => set.all().any(|holder| holder.holding().has_session()),
        LockValue::Once(record) => record.running_holding().is_some_and(Holding::has_session),
    }
}

/// A lock value of encver 1 or later, its holdings carrying `carries`; `None` fails
/// the load.
fn load_value(rdb: *mut raw::RedisModuleIO, carries: Carries) -> Option<LockValue> {
    match load_unsigned(rdb)? {
        KIND_EXCLUSIVE => load_holding(rdb, carries).map(LockValue::Exclusive),
        KIND_SHARED => load_shared(rdb, carries).map(LockValue::Shared),
        KIND_ONCE if carries == Carries::Value => once_type::load(rdb).map(LockValue::Once),
        _ => None,
    }
}

/// A set of shared holders: limit, count, then each holder with its deadline. A set
/// with no holders, or a limit it exceeds, is corrupt.
fn load_shared(rdb: *mut raw::RedisModuleIO, carries: Carries) -> Option<Box<SharedHolders>> {
    let limit = u32::try_from(load_unsigned(rdb)?).ok()?;
    let count = load_unsigned(rdb)?;
    if count == 0 || (limit != 0 && count > u64::from(limit)) {
        return None;
    }
    let mut set = SharedHolders::new(Mode::from_stored_limit(limit));
    for _ in 0..count {
        let holding = load_holding(rdb, carries)?;
        let deadline = load_signed(rdb)?;
        // Two holders with one token or one fence are never saved; a payload that has
        // them is corrupt.
        if set.holds_token_of(&holding) {
            return None;
        }
        set.insert(holding, deadline).ok()?;
    }
    Some(set)
}

/// The lock behind a value pointer Redis passes to a callback.
///
/// # Safety
/// `value` must be null or a value of this type.
unsafe fn lock<'a>(value: *const c_void) -> Option<LockRef<'a>> {
    // SAFETY: the caller passes a value of this type, made by `LockValue::into_raw`.
    (!value.is_null()).then(|| unsafe { LockValue::from_raw(value.cast()) })
}

/// The run-once record behind a value pointer, if it is one.
///
/// # Safety
/// As `lock`.
unsafe fn once<'a>(value: *const c_void) -> Option<&'a OnceRecord> {
    // SAFETY: as `lock`.
    (!value.is_null())
        .then(|| unsafe { LockValue::once(value.cast()) })
        .flatten()
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    let Some(lock) = (unsafe { lock(value) }) else {
        return;
    };
    // SAFETY: as above.
    let record = unsafe { once(value) };
    panic_guard::callback("RDB save", (), || match lock {
        _ if record.is_some() => {
            save_unsigned(rdb, KIND_ONCE);
            if let Some(record) = record {
                once_type::save(rdb, record);
            }
        }
        LockRef::Exclusive(holding) | LockRef::Quarantined(holding) => {
            save_unsigned(rdb, KIND_EXCLUSIVE);
            save_holding(rdb, holding);
        }
        LockRef::Shared(set) => {
            save_unsigned(rdb, KIND_SHARED);
            save_unsigned(rdb, u64::from(set.mode().stored_limit()));
            save_unsigned(rdb, u64::try_from(set.len()).unwrap_or(0));
            for holder in set.all() {
                save_holding(rdb, holder.holding());
                // SAFETY: the IO handle Redis passed in.
                unsafe { api!(RedisModule_SaveSigned)(rdb, holder.deadline_ms()) };
            }
        }
    });
}

/// Rewrites a held lock as the same `LOCK.APPLY` the replication stream uses: an
/// exclusive holding without a deadline (Redis appends the key's `PEXPIREAT` itself)
/// unless it has a lock-delay (its lease end, then `PERSIST`), each shared holder with
/// its own, then `PERSIST`: the `LOCK.APPLY`s set the key's expiry to the latest lease
/// and delay, and Redis appends the key's real one only if it has one.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a value of this type.
    let Some(lock) = (unsafe { lock(value) }) else {
        return;
    };
    // SAFETY: as above.
    let record = unsafe { once(value) };
    panic_guard::callback("AOF rewrite", (), || {
        // Without the RDB preamble nothing else carries the node's state.
        node_state_form::rewrite_once(aof);
        if let Some(record) = record {
            // SAFETY: the key string Redis passed to the rewrite lives for the call.
            let name = unsafe { bytes_of(key) };
            let args = once_type::record_args(name, record, None);
            let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            emit_argv(aof, c"LOCK.RECORD", &args);
            return;
        }
        // Whatever a `LOCK.APPLY` with a deadline made of the key's expiry, `PERSIST`
        // undoes it, and Redis appends the key's real one only if it has one.
        let spelled_deadline = match lock {
            LockRef::Exclusive(holding) | LockRef::Quarantined(holding) => {
                emit_apply(aof, key, holding, None);
                // A lock-delay's lease end is spelled out (`PXAT`).
                holding.lease_end_ms().is_some()
            }
            LockRef::Shared(set) => {
                for holder in set.all() {
                    let shared = (holder.deadline_ms(), set.mode());
                    emit_apply(aof, key, holder.holding(), Some(shared));
                }
                true
            }
        };
        if spelled_deadline {
            // SAFETY: the format "s" matches one module string.
            unsafe { api!(RedisModule_EmitAOF)(aof, c"PERSIST".as_ptr(), c"s".as_ptr(), key) };
        }
    });
}

/// `LOCK.APPLY key token fence`, and for a shared holder `PXAT deadline` and its mode
/// (`SHARED` or `LIMIT n`).
fn emit_apply(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    holding: &Holding,
    shared: Option<(i64, Mode)>,
) {
    let token = holding.token();
    let deadline = shared.map(|(deadline, _)| deadline);
    let mode = shared.map_or(Mode::Exclusive, |(_, mode)| mode);
    let (session, lock_delay_ms) = holding.extras();
    let extras = Extras {
        session: session.as_deref(),
        lock_delay_ms,
        value: holding.value(),
    };
    if extras != Extras::default() {
        // An exclusive holding with a lock-delay spells its own lease end; Redis's
        // `PEXPIREAT` that follows sets the key's.
        let deadline = deadline.or(holding.lease_end_ms());
        let form = ApplyForm::new(&token, holding.fence(), deadline, mode, extras);
        // SAFETY: the key string Redis passed to the rewrite lives for the call.
        let name = unsafe { bytes_of(key) };
        emit_argv(aof, c"LOCK.APPLY", &form.args(name));
        return;
    }
    let fence = holding.fence().to_string();
    let deadline = deadline.map(|deadline| deadline.to_string());
    let emit = api!(RedisModule_EmitAOF);
    emit_lock_apply!(
        emit,
        aof,
        key,
        &token,
        fence.as_bytes(),
        deadline.as_deref().map(str::as_bytes),
        mode
    );
}

/// One AOF command from an argv of byte strings (format `v`).
fn emit_argv(aof: *mut raw::RedisModuleIO, command: &std::ffi::CStr, args: &[&[u8]]) {
    let create = api!(RedisModule_CreateString);
    let strings: Vec<*mut raw::RedisModuleString> = args
        .iter()
        // SAFETY: a buffer with its length; no context: freed below.
        .map(|arg| unsafe { create(std::ptr::null_mut(), arg.as_ptr().cast(), arg.len()) })
        .collect();
    // SAFETY: the format "v" matches an array of module strings and its length.
    unsafe {
        api!(RedisModule_EmitAOF)(
            aof,
            command.as_ptr(),
            c"v".as_ptr(),
            strings.as_ptr(),
            strings.len(),
        );
    }
    let free = api!(RedisModule_FreeString);
    for string in strings {
        // SAFETY: made above without a context, freed once.
        unsafe { free(std::ptr::null_mut(), string) };
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of this type.
    if let Some(record) = unsafe { once(value) } {
        return record.allocated_bytes();
    }
    // SAFETY: as above.
    unsafe { lock(value) }.map_or(0, LockRef::allocated_bytes)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    let Some(lock) = (unsafe { lock(value) }) else {
        return;
    };
    // SAFETY: as above.
    let record = unsafe { once(value) };
    panic_guard::callback("DEBUG DIGEST", (), || {
        match lock {
            _ if record.is_some() => {
                if let Some(record) = record {
                    once_type::digest(md, record);
                }
            }
            LockRef::Exclusive(holding) | LockRef::Quarantined(holding) => {
                digest_holding(md, holding)
            }
            LockRef::Shared(set) => {
                digest_number(md, i64::from(set.mode().stored_limit()));
                for holder in set.all() {
                    digest_holding(md, holder.holding());
                    digest_number(md, holder.deadline_ms());
                }
            }
        }
        // SAFETY: the digest Redis passed in.
        unsafe { api!(RedisModule_DigestEndSequence)(md) };
    });
}

/// Frees a value; may run on the lazy-free thread (no guard: nothing here can panic,
/// and nothing but the value is touched).
unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        stats::LIVE_LOCKS.down();
        // SAFETY: a value of this type, not yet freed.
        if unsafe { once_type::is_done_record_raw(value.cast()) } {
            stats::ONCE_DONE_RECORDS.down();
        }
        // SAFETY: a value of this type, freed once by Redis.
        unsafe { LockValue::free_raw(value.cast()) };
    }
}

unsafe extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let Some(observer) = UNLINK_OBSERVER.get() else {
        return;
    };
    // SAFETY: Redis passes a value of this type.
    let Some(lock) = (unsafe { lock(value) }) else {
        return;
    };
    // SAFETY: the key-operation context Redis passed to unlink2.
    if let Some((db, name)) = unsafe { unlinked_key(ctx) } {
        panic_guard::callback("unlink", (), || observer(db, name, lock));
    }
}

/// The database and name of the key an `unlink2` callback is about.
///
/// # Safety
/// `ctx` must be the key-operation context Redis passed to `unlink2`; the name lives
/// for that call.
pub(super) unsafe fn unlinked_key<'a>(
    ctx: *mut raw::RedisModuleKeyOptCtx,
) -> Option<(i32, &'a [u8])> {
    // SAFETY: as the caller promises.
    let (name, db) = unsafe {
        (
            api!(RedisModule_GetKeyNameFromOptCtx)(ctx),
            api!(RedisModule_GetDbIdFromOptCtx)(ctx),
        )
    };
    // SAFETY: the key string lives for the call.
    (!name.is_null()).then(|| (db, unsafe { bytes_of(name) }))
}

/// Before the keyspace: the node's last fence. After it: the floor of evicted marks.
unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    let value = if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        node_fence::last()
    } else {
        node_fence::mark_floor()
    };
    save_unsigned(rdb, value);
}

/// As `aux_save`, on servers that leave out an aux field nothing was written to (Redis
/// 7.2 and later, Valkey): the floor is written only once a mark was evicted, so a
/// file without one still loads into a release that knew no floor — and one with a
/// floor fails to load there rather than losing it.
unsafe extern "C" fn aux_save2(rdb: *mut raw::RedisModuleIO, when: c_int) {
    if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int || node_fence::mark_floor() > 0 {
        // SAFETY: the IO handle Redis passed in.
        unsafe { aux_save(rdb, when) };
    }
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    let known = (EXCLUSIVE_ONLY_VERSION..=ENCODING_VERSION).contains(&encver);
    let Some(value) = load_unsigned(rdb).filter(|_| known) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        node_fence::observe(value);
    } else {
        node_fence::raise_mark_floor(value);
    }
    raw::REDISMODULE_OK as c_int
}
