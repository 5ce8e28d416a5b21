//! The fields a lock value is made of in an RDB (or a `RESTORE` payload) and in a
//! `DEBUG DIGEST`: numbers, buffers and a holding, each read with its IO error checked.
//! Below both value layouts that use them: `data_type` (exclusive and shared locks) and
//! `once_type` (run-once records).

use fencelock_core::holding::{Extras, Holding};
use redis_module::raw;

use crate::node_fence;

/// What a holding carries in an RDB of each encver from 1 on.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Carries {
    TokenAndFence,
    SessionAndDelay,
    Value,
}

pub(super) fn io_failed(rdb: *mut raw::RedisModuleIO) -> bool {
    // SAFETY: `rdb` is the IO handle Redis passed to the callback.
    unsafe { api!(RedisModule_IsIOError)(rdb) != 0 }
}

pub(super) fn load_buffer(rdb: *mut raw::RedisModuleIO) -> Option<Box<[u8]>> {
    let mut len: usize = 0;
    // SAFETY: Redis returns a buffer of `len` bytes that we copy and then free.
    unsafe {
        let buffer = api!(RedisModule_LoadStringBuffer)(rdb, &mut len);
        if buffer.is_null() {
            return None;
        }
        let token: Box<[u8]> = std::slice::from_raw_parts(buffer.cast::<u8>(), len).into();
        api!(RedisModule_Free)(buffer.cast());
        Some(token)
    }
}

pub(super) fn load_unsigned(rdb: *mut raw::RedisModuleIO) -> Option<u64> {
    // SAFETY: reads from the IO handle Redis passed in; checked for IO errors below.
    let value = unsafe { api!(RedisModule_LoadUnsigned)(rdb) };
    (!io_failed(rdb)).then_some(value)
}

/// One holding (token, fence, and what else it `carries`) read from an RDB (or
/// `RESTORE` payload), validated.
pub(super) fn load_holding(rdb: *mut raw::RedisModuleIO, carries: Carries) -> Option<Box<Holding>> {
    let token = load_buffer(rdb).filter(|_| !io_failed(rdb))?;
    let fence = load_unsigned(rdb)?;
    let (session, lock_delay_ms) = if carries >= Carries::SessionAndDelay {
        let session = load_buffer(rdb).filter(|_| !io_failed(rdb))?;
        (Some(session), load_unsigned(rdb)?)
    } else {
        (None, 0)
    };
    let lease_end = match lock_delay_ms {
        0 => None,
        _ => Some(load_signed(rdb)?),
    };
    let value = match carries {
        Carries::Value => Some(load_buffer(rdb).filter(|_| !io_failed(rdb))?),
        _ => None,
    };
    let extras = Extras {
        session: session.as_deref().filter(|session| !session.is_empty()),
        lock_delay_ms,
        value: value.as_deref(),
    };
    let mut holding = Holding::from_persisted(&token, fence, extras)?;
    if let Some(end) = lease_end {
        holding.set_lease_end(end);
    }
    node_fence::observe(fence);
    Some(holding)
}

pub(super) fn load_signed(rdb: *mut raw::RedisModuleIO) -> Option<i64> {
    // SAFETY: reads from the IO handle Redis passed in; checked for IO errors below.
    let value = unsafe { api!(RedisModule_LoadSigned)(rdb) };
    (!io_failed(rdb)).then_some(value)
}

pub(super) fn save_unsigned(rdb: *mut raw::RedisModuleIO, value: u64) {
    // SAFETY: the IO handle Redis passed in.
    unsafe { api!(RedisModule_SaveUnsigned)(rdb, value) };
}

pub(super) fn save_holding(rdb: *mut raw::RedisModuleIO, holding: &Holding) {
    save_buffer(rdb, &holding.token());
    save_unsigned(rdb, holding.fence());
    save_buffer(rdb, holding.session().as_deref().unwrap_or_default());
    save_unsigned(rdb, holding.lock_delay_ms());
    if let Some(end) = holding.lease_end_ms() {
        // SAFETY: the IO handle Redis passed in.
        unsafe { api!(RedisModule_SaveSigned)(rdb, end) };
    }
    save_buffer(rdb, holding.value().unwrap_or_default());
}

pub(super) fn save_buffer(rdb: *mut raw::RedisModuleIO, bytes: &[u8]) {
    // SAFETY: the IO handle Redis passed in and a buffer with its length.
    unsafe { api!(RedisModule_SaveStringBuffer)(rdb, bytes.as_ptr().cast(), bytes.len()) };
}

pub(super) fn digest_holding(md: *mut raw::RedisModuleDigest, holding: &Holding) {
    digest_buffer(md, &holding.token());
    digest_number(md, i64::try_from(holding.fence()).unwrap_or(i64::MAX));
    // Only what a holding has, so a lock without either digests as it always did.
    if let Some(session) = holding.session() {
        digest_buffer(md, &session);
    }
    if holding.lock_delay_ms() > 0 {
        digest_number(
            md,
            i64::try_from(holding.lock_delay_ms()).unwrap_or(i64::MAX),
        );
    }
    if let Some(end) = holding.lease_end_ms() {
        digest_number(md, end);
    }
    if let Some(value) = holding.value() {
        digest_buffer(md, value);
    }
}

pub(super) fn digest_buffer(md: *mut raw::RedisModuleDigest, bytes: &[u8]) {
    // SAFETY: the digest Redis passed in and a buffer with its length.
    unsafe {
        api!(RedisModule_DigestAddStringBuffer)(md, bytes.as_ptr().cast_mut().cast(), bytes.len());
    }
}

pub(super) fn digest_number(md: *mut raw::RedisModuleDigest, number: i64) {
    // SAFETY: the digest Redis passed in.
    unsafe { api!(RedisModule_DigestAddLongLong)(md, number) };
}
