//! The `floorlock` value: the bytes of a fencelock exclusive holding, in one allocation
//! of the same size, with the data type callbacks a value needs (RDB save and load,
//! free, `MEMORY USAGE`), and the fence clock.
//!
//! Layout, as fencelock's packed holding (`core/src/holding.rs`) of a generated token:
//! `fence: u64 LE | header: u16 LE (16 | 0x8000, "16 bytes, compact") | 16 raw token
//! bytes` = 26 bytes, alignment 1, one allocation (jemalloc's 32-byte class), no
//! pointer inside. The header is constant here (every floor token is generated) but
//! kept, so the allocation and `MEMORY USAGE` are byte for byte fencelock's.
//!
//! Fence: fencelock's hybrid clock, `max(last + 1, now in µs)`, so the floor pays the
//! same wall-clock read per grant and its fences survive a restart without
//! persistence the same way (a plain counter would be cheaper than fencelock can be,
//! and that is not the floor's job). Single-threaded: every command and RDB load runs
//! on Redis's main thread, so a relaxed atomic is all the static needs.
//!
//! RDB, encver 0: the 16 raw token bytes (string buffer), then the fence (unsigned).
//! A payload of another shape fails the load. No aux data: the clock is raised by the
//! fences loaded. `aof_rewrite` writes nothing (a lock is a lease the floor may lose),
//! which keeps a rewrite without the RDB preamble from calling a null callback.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::{native_types::RedisType, raw};

/// Raw bytes of a generated token; clients see them as 32 lowercase hex characters.
pub const TOKEN_BYTES: usize = 16;
/// fencelock's header for a compact 16-byte token: the length with the top bit set.
const COMPACT_HEADER: u16 = 0x8000 | TOKEN_BYTES as u16;
/// Replies carry fences as RESP integers (signed 64-bit), as fencelock's.
const MAX_FENCE: u64 = i64::MAX as u64;

/// One held lock. Only ever handled in a `Box` (handed to Redis as a thin pointer).
#[repr(C)]
pub struct FloorLock {
    fence: [u8; 8],
    header: [u8; 2],
    token: [u8; TOKEN_BYTES],
}

/// fencelock's packed holding of a generated token is 26 bytes: so is this.
const _: () = assert!(std::mem::size_of::<FloorLock>() == 26);
const _: () = assert!(std::mem::align_of::<FloorLock>() == 1);

impl FloorLock {
    pub fn new(fence: u64, token: [u8; TOKEN_BYTES]) -> Box<Self> {
        Box::new(FloorLock {
            fence: fence.to_le_bytes(),
            header: COMPACT_HEADER.to_le_bytes(),
            token,
        })
    }

    pub fn fence(&self) -> u64 {
        u64::from_le_bytes(self.fence)
    }

    /// Whether `offered` (the client's text) is this lock's token: as fencelock, the
    /// 32 hex characters decoded once, then compared with the stored bytes without an
    /// early exit.
    pub fn is_token(&self, offered: &[u8]) -> bool {
        from_hex(offered).is_some_and(|raw| {
            let difference = u128::from_ne_bytes(raw) ^ u128::from_ne_bytes(self.token);
            std::hint::black_box(difference) == 0
        })
    }
}

const HEX: [u8; 16] = *b"0123456789abcdef";

/// The 32 lowercase hex characters clients know a token by.
pub fn to_hex(raw: &[u8; TOKEN_BYTES]) -> [u8; 2 * TOKEN_BYTES] {
    let mut text = [0u8; 2 * TOKEN_BYTES];
    for (pair, &byte) in text.chunks_exact_mut(2).zip(raw) {
        if let [high, low] = pair {
            *high = HEX[usize::from(byte >> 4)];
            *low = HEX[usize::from(byte & 0x0f)];
        }
    }
    text
}

/// The raw bytes behind a token spelled as `to_hex` spells it, or `None`.
fn from_hex(text: &[u8]) -> Option<[u8; TOKEN_BYTES]> {
    if text.len() != 2 * TOKEN_BYTES {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut raw = [0u8; TOKEN_BYTES];
    for (byte, pair) in raw.iter_mut().zip(text.chunks_exact(2)) {
        let &[high, low] = pair else { return None };
        *byte = (nibble(high)? << 4) | nibble(low)?;
    }
    Some(raw)
}

/// The highest fence issued or loaded.
static LAST_FENCE: AtomicU64 = AtomicU64::new(0);

/// The next fence, `max(last + 1, now µs)`; `None` once `MAX_FENCE` is reached.
pub fn issue_fence() -> Option<u64> {
    let now_micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
        });
    let next = LAST_FENCE
        .load(Ordering::Relaxed)
        .checked_add(1)?
        .max(now_micros);
    if next > MAX_FENCE {
        return None;
    }
    LAST_FENCE.store(next, Ordering::Relaxed);
    Some(next)
}

pub static FLOOR_TYPE: RedisType = RedisType::new(
    "floorlock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: None,
        free: Some(free),
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
    },
);

const ENCODING_VERSION: i32 = 0;

/// The lock behind a value pointer Redis passes to a callback.
///
/// # Safety
/// `value` must be null or a value of this type, live for `'a`.
pub unsafe fn lock<'a>(value: *const c_void) -> Option<&'a FloorLock> {
    // SAFETY: values of this type are only ever made by `Box::into_raw` of a FloorLock.
    unsafe { value.cast::<FloorLock>().as_ref() }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    let Some(lock) = (unsafe { lock(value) }) else {
        return;
    };
    // SAFETY: the IO handle Redis passed in, and a buffer with its length.
    unsafe {
        api!(RedisModule_SaveStringBuffer)(rdb, lock.token.as_ptr().cast(), TOKEN_BYTES);
        api!(RedisModule_SaveUnsigned)(rdb, lock.fence());
    }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return std::ptr::null_mut();
    }
    let mut len = 0usize;
    let mut token = [0u8; TOKEN_BYTES];
    // SAFETY: Redis returns a buffer of `len` bytes (or null), copied and then freed;
    // every read is checked for an IO error (the module handles them itself).
    let fence = unsafe {
        let buffer = api!(RedisModule_LoadStringBuffer)(rdb, &mut len);
        if buffer.is_null() {
            return std::ptr::null_mut();
        }
        let stored = std::slice::from_raw_parts(buffer.cast::<u8>(), len);
        let fits = stored.len() == TOKEN_BYTES;
        if fits {
            token.copy_from_slice(stored);
        }
        api!(RedisModule_Free)(buffer.cast());
        let fence = api!(RedisModule_LoadUnsigned)(rdb);
        if !fits || api!(RedisModule_IsIOError)(rdb) != 0 {
            return std::ptr::null_mut();
        }
        fence
    };
    if fence == 0 || fence > MAX_FENCE {
        return std::ptr::null_mut();
    }
    LAST_FENCE.fetch_max(fence, Ordering::Relaxed);
    Box::into_raw(FloorLock::new(fence, token)).cast()
}

/// Nothing: see the file header.
unsafe extern "C" fn aof_rewrite(
    _aof: *mut raw::RedisModuleIO,
    _key: *mut raw::RedisModuleString,
    _value: *mut c_void,
) {
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    if value.is_null() {
        0
    } else {
        std::mem::size_of::<FloorLock>()
    }
}

/// May run on Redis's lazy-free thread: touches nothing but the value.
unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: a value of this type (made by `Box::into_raw`), freed once by Redis.
        drop(unsafe { Box::from_raw(value.cast::<FloorLock>()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_fencelocks_26_bytes() {
        let lock = FloorLock::new(0x0102_0304_0506_0708, [7; TOKEN_BYTES]);
        // SAFETY: a FloorLock is 26 plain bytes.
        let bytes: &[u8; 26] = unsafe { &*(std::ptr::from_ref(&*lock).cast()) };
        assert_eq!(&bytes[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&bytes[8..10], &[16, 0x80]);
        assert_eq!(&bytes[10..], &[7; TOKEN_BYTES]);
        assert_eq!(lock.fence(), 0x0102_0304_0506_0708);
    }

    #[test]
    fn tokens_match_only_their_exact_lowercase_hex() {
        let raw: [u8; TOKEN_BYTES] =
            *b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\xab\xcd\xef\x10\xfe\xff";
        let lock = FloorLock::new(1, raw);
        let text = to_hex(&raw);
        assert_eq!(&text, b"00010203040506070809abcdef10feff");
        assert!(lock.is_token(&text));
        assert!(!lock.is_token(b"00010203040506070809ABCDEF10FEFF"));
        assert!(!lock.is_token(&text[..31]));
        let mut other = text;
        other[31] = b'e';
        assert!(!lock.is_token(&other));
        assert!(!lock.is_token(b""));
    }

    #[test]
    fn fences_rise() {
        let first = issue_fence().unwrap();
        let second = issue_fence().unwrap();
        assert!(second > first && first > 1_600_000_000_000_000);
    }
}
