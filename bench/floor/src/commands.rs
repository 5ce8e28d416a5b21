//! `FLOOR.ACQUIRE`, `FLOOR.RELEASE`, `FLOOR.REFRESH`: fencelock's key work per command,
//! over Redis's own argv (no copies), replying straight to the client.
//!
//! Per command, as fencelock's exclusive path: the key opened for reading and writing
//! (which drops it first if its expiry has passed); its type looked at (a key of
//! another type is `WRONGTYPE`, as fencelock); then for a grant a fence, 16 bytes from
//! `rand`'s `ThreadRng` (fencelock's token source: a CSPRNG, seeded from the OS), the
//! value stored and the expiry set; for a release or refresh the offered token decoded
//! from hex and compared with the stored bytes, then the key deleted or its expiry set.
//! A change signals the key as modified and is propagated verbatim (see `lib.rs`).
//!
//! Errors: Redis's own arity text; `ERR value is not an integer or out of range`; an
//! expiry ≤ 0 or over fencelock's default `max-ttl` (30 days) is `ERR invalid expire
//! time in '<command>' command`; an empty token `ERR invalid token`. A panic (none is
//! expected) is caught and answered as an error: the server keeps running.

use std::ffi::{c_int, c_long, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use rand::RngCore;
use redis_module::raw;

use crate::value::{self, FloorLock, FLOOR_TYPE, TOKEN_BYTES};

type Ctx = *mut raw::RedisModuleCtx;
type Arg = *mut raw::RedisModuleString;

/// fencelock's default `fencelock.max-ttl`: 30 days.
const MAX_TTL_MS: i64 = 30 * 24 * 60 * 60 * 1000;

/// Why a command is refused; anything else it replies itself.
enum Refusal {
    Arity,
    Error(&'static CStr),
}

const NOT_AN_INTEGER: Refusal = Refusal::Error(c"ERR value is not an integer or out of range");
const WRONG_TYPE: Refusal =
    Refusal::Error(c"WRONGTYPE Operation against a key holding the wrong kind of value");
const INVALID_TOKEN: Refusal = Refusal::Error(c"ERR invalid token");
const WRITE_FAILED: Refusal = Refusal::Error(c"ERR lock key could not be written");

type Body = fn(Ctx, &[Arg]) -> Result<(), Refusal>;

/// Runs `body` over the arguments, inside a panic guard; sends the refusal if any.
///
/// # Safety
/// Called by Redis with a live context and `argc` live argument strings.
unsafe fn run(ctx: Ctx, argv: *mut Arg, argc: c_int, body: Body) -> c_int {
    let count = usize::try_from(argc).unwrap_or(0);
    let args: &[Arg] = if argv.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` argument pointers that live for the call.
        unsafe { std::slice::from_raw_parts(argv, count) }
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| body(ctx, args))).unwrap_or(Err(
        Refusal::Error(c"ERR internal error in fencelock-floor"),
    ));
    // SAFETY: a live command context; nothing was replied on a refusal.
    unsafe {
        match outcome {
            Ok(()) => {}
            Err(Refusal::Arity) => {
                api!(RedisModule_WrongArity)(ctx);
            }
            Err(Refusal::Error(text)) => {
                api!(RedisModule_ReplyWithError)(ctx, text.as_ptr());
            }
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// # Safety
/// Called by Redis as a command's entry point.
pub unsafe extern "C" fn acquire(ctx: Ctx, argv: *mut Arg, argc: c_int) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { run(ctx, argv, argc, acquire_body) }
}

/// # Safety
/// Called by Redis as a command's entry point.
pub unsafe extern "C" fn release(ctx: Ctx, argv: *mut Arg, argc: c_int) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { run(ctx, argv, argc, release_body) }
}

/// # Safety
/// Called by Redis as a command's entry point.
pub unsafe extern "C" fn refresh(ctx: Ctx, argv: *mut Arg, argc: c_int) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { run(ctx, argv, argc, refresh_body) }
}

/// `FLOOR.ACQUIRE key ttl-ms` → `[token, fence]`, or nil when the key exists.
fn acquire_body(ctx: Ctx, args: &[Arg]) -> Result<(), Refusal> {
    let &[_, name, ttl] = args else {
        return Err(Refusal::Arity);
    };
    let ttl_ms = parse_ttl(ttl, c"ERR invalid expire time in 'floor.acquire' command")?;
    let key = Key::open(ctx, name);
    if key.lock()?.is_some() {
        // SAFETY: a live command context.
        unsafe { api!(RedisModule_ReplyWithNull)(ctx) };
        return Ok(());
    }
    let fence = value::issue_fence().ok_or(Refusal::Error(
        c"ERR no fence left to issue: the fence clock is at its maximum",
    ))?;
    let mut token = [0u8; TOKEN_BYTES];
    rand::thread_rng().fill_bytes(&mut token);
    key.store(FloorLock::new(fence, token))?;
    key.expire(ttl_ms)?;
    key.changed();
    drop(key);
    replicate_verbatim(ctx);
    let text = value::to_hex(&token);
    // SAFETY: a two-element array followed by exactly two elements, on a live context.
    unsafe {
        api!(RedisModule_ReplyWithArray)(ctx, 2 as c_long);
        api!(RedisModule_ReplyWithStringBuffer)(ctx, text.as_ptr().cast(), text.len());
        api!(RedisModule_ReplyWithLongLong)(ctx, i64::try_from(fence).unwrap_or(i64::MAX));
    }
    Ok(())
}

/// `FLOOR.RELEASE key token` → 1 (the key deleted) if `token` holds it, else 0.
fn release_body(ctx: Ctx, args: &[Arg]) -> Result<(), Refusal> {
    let &[_, name, token] = args else {
        return Err(Refusal::Arity);
    };
    let token = offered_token(token)?;
    let key = Key::open(ctx, name);
    let held = key.lock()?.is_some_and(|lock| lock.is_token(token));
    if held {
        key.delete()?;
        key.changed();
        drop(key);
        replicate_verbatim(ctx);
    }
    reply_integer(ctx, i64::from(held));
    Ok(())
}

/// `FLOOR.REFRESH key token ttl-ms` → 1 (the expiry set to ttl-ms) if `token` holds
/// it, else 0.
fn refresh_body(ctx: Ctx, args: &[Arg]) -> Result<(), Refusal> {
    let &[_, name, token, ttl] = args else {
        return Err(Refusal::Arity);
    };
    let ttl_ms = parse_ttl(ttl, c"ERR invalid expire time in 'floor.refresh' command")?;
    let token = offered_token(token)?;
    let key = Key::open(ctx, name);
    let held = key.lock()?.is_some_and(|lock| lock.is_token(token));
    if held {
        key.expire(ttl_ms)?;
        key.changed();
        drop(key);
        replicate_verbatim(ctx);
    }
    reply_integer(ctx, i64::from(held));
    Ok(())
}

fn reply_integer(ctx: Ctx, value: i64) {
    // SAFETY: a live command context.
    unsafe { api!(RedisModule_ReplyWithLongLong)(ctx, value) };
}

fn replicate_verbatim(ctx: Ctx) {
    // SAFETY: a live command context.
    unsafe { api!(RedisModule_ReplicateVerbatim)(ctx) };
}

/// A lease in ms: an integer in 1..=MAX_TTL_MS.
fn parse_ttl(arg: Arg, invalid: &'static CStr) -> Result<i64, Refusal> {
    let mut ttl: i64 = 0;
    // SAFETY: a live argument string and a valid out pointer.
    let parsed = unsafe { api!(RedisModule_StringToLongLong)(arg, &mut ttl) };
    if parsed != raw::REDISMODULE_OK as c_int {
        return Err(NOT_AN_INTEGER);
    }
    if ttl <= 0 || ttl > MAX_TTL_MS {
        return Err(Refusal::Error(invalid));
    }
    Ok(ttl)
}

/// The bytes of a token argument (non-empty, as fencelock requires).
fn offered_token<'a>(arg: Arg) -> Result<&'a [u8], Refusal> {
    let bytes = bytes_of(arg);
    if bytes.is_empty() {
        return Err(INVALID_TOKEN);
    }
    Ok(bytes)
}

/// The bytes of an argument, borrowed for the command (Redis owns argv until it
/// returns).
fn bytes_of<'a>(arg: Arg) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: a live argument string.
    let ptr = unsafe { api!(RedisModule_StringPtrLen)(arg, &mut len) };
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: Redis's buffer of `len` bytes, unchanged while the command runs.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// A key opened for reading and writing, closed on drop.
struct Key {
    ctx: Ctx,
    name: Arg,
    key: *mut raw::RedisModuleKey,
}

impl Key {
    fn open(ctx: Ctx, name: Arg) -> Key {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: a live context and key name; the handle is closed on drop.
        let key = unsafe { api!(RedisModule_OpenKey)(ctx, name, mode) };
        Key { ctx, name, key }
    }

    fn floor_type() -> Result<*mut raw::RedisModuleType, Refusal> {
        FLOOR_TYPE
            .raw_type
            .try_borrow()
            .map(|raw_type| *raw_type)
            .map_err(|_| WRITE_FAILED)
    }

    /// The lock, `None` when the key is empty, `WRONGTYPE` when it holds another type.
    fn lock(&self) -> Result<Option<&FloorLock>, Refusal> {
        if self.key.is_null() {
            return Ok(None);
        }
        // SAFETY: an open key handle; values of our type are FloorLocks, live while
        // the key is open and unchanged (the borrow ends before any change).
        unsafe {
            let key_type = api!(RedisModule_KeyType)(self.key);
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
                return Ok(None);
            }
            if key_type != raw::REDISMODULE_KEYTYPE_MODULE as c_int
                || api!(RedisModule_ModuleTypeGetType)(self.key) != Self::floor_type()?
            {
                return Err(WRONG_TYPE);
            }
            Ok(value::lock(api!(RedisModule_ModuleTypeGetValue)(self.key)))
        }
    }

    fn store(&self, lock: Box<FloorLock>) -> Result<(), Refusal> {
        let floor_type = Self::floor_type()?;
        if self.key.is_null() {
            return Err(WRITE_FAILED);
        }
        let lock = Box::into_raw(lock);
        // SAFETY: an open key; on success Redis owns the value and frees it with the
        // type's `free`.
        let stored =
            unsafe { api!(RedisModule_ModuleTypeSetValue)(self.key, floor_type, lock.cast()) }
                == raw::REDISMODULE_OK as c_int;
        if !stored {
            // SAFETY: Redis refused the value, so it is still ours.
            drop(unsafe { Box::from_raw(lock) });
            return Err(WRITE_FAILED);
        }
        Ok(())
    }

    fn expire(&self, ttl_ms: i64) -> Result<(), Refusal> {
        // SAFETY: an open key (or null, which Redis refuses).
        let set = !self.key.is_null()
            && unsafe { api!(RedisModule_SetExpire)(self.key, ttl_ms) }
                == raw::REDISMODULE_OK as c_int;
        set.then_some(()).ok_or(WRITE_FAILED)
    }

    fn delete(&self) -> Result<(), Refusal> {
        // SAFETY: an open key.
        let deleted = !self.key.is_null()
            && unsafe { api!(RedisModule_DeleteKey)(self.key) } == raw::REDISMODULE_OK as c_int;
        deleted.then_some(()).ok_or(WRITE_FAILED)
    }

    /// The key changed: `WATCH`ers and client-side caches hear of it (the module turned
    /// Redis's implicit signal on close off, as fencelock does).
    fn changed(&self) {
        // SAFETY: a live context and key name.
        unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx, self.name) };
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: closed exactly once, here.
            unsafe { api!(RedisModule_CloseKey)(self.key) };
        }
    }
}
