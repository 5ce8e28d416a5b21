//! A run-once record (`LOCK.ONCE` / `LOCK.DONE`) in the `fencelock` data type: its RDB
//! payload, its effect form `LOCK.RECORD` (replication, AOF rewrite), its digest, and
//! whether a value is a done record (INFO counts those apart from held locks).
//!
//! RDB, kind 2 of encver 3 (a build that knows no such kind refuses the key rather
//! than misread it; older files have none, so the encver stays): a state (unsigned: 0
//! running, 1 done); running: the run's holding as every holding is saved, then the
//! keep time (unsigned ms) and the fingerprint (a flag, unsigned 0/1, then a string
//! buffer); done: the run's fence, the keep time, the fingerprint, the result (string
//! buffer). The key's expiry is the lease (running) or the end of the keep time (done).
//!
//! `LOCK.RECORD key RUNNING token fence KEEP ms [PXAT deadline] [FINGERPRINT fp]
//! [SESSION s] [VALUE v]` and `LOCK.RECORD key DONE fence result KEEP ms [PXAT until]
//! [FINGERPRINT fp]`: without `PXAT` in an AOF rewrite (Redis appends the key's
//! `PEXPIREAT`).

use fencelock_core::once::OnceRecord;
use fencelock_core::value::LockValue;
use redis_module::raw;

use super::rdb_fields::{
    digest_buffer, digest_holding, digest_number, load_buffer, load_holding, load_unsigned,
    save_buffer, save_holding, save_unsigned, Carries,
};

/// Whether `value` is a run-once done record (a stored result: no lease).
pub(crate) fn is_done_record(value: &LockValue) -> bool {
    matches!(value, LockValue::Once(record) if record.is_done())
}

/// `is_done_record` of a value behind a pointer, reading only that value (safe on the
/// lazy-free thread).
///
/// # Safety
/// `value` must be a live value of this type.
pub(crate) unsafe fn is_done_record_raw(value: *const u8) -> bool {
    // SAFETY: the caller's contract.
    unsafe { LockValue::once(value) }.is_some_and(|record| record.is_done())
}

const RUNNING: u64 = 0;
const DONE: u64 = 1;

/// Reads a record saved by `save`; `None` fails the load.
pub(super) fn load(rdb: *mut raw::RedisModuleIO) -> Option<Box<OnceRecord>> {
    match load_unsigned(rdb)? {
        RUNNING => {
            let holding = load_holding(rdb, Carries::Value)?;
            let keep_ms = load_unsigned(rdb)?;
            let fingerprint = load_fingerprint(rdb)?;
            Some(OnceRecord::running(
                holding,
                keep_ms,
                fingerprint.as_deref(),
            ))
        }
        DONE => {
            let fence = load_unsigned(rdb)?;
            if fence > fencelock_core::fence_clock::MAX_FENCE {
                return None;
            }
            let keep_ms = load_unsigned(rdb)?;
            let fingerprint = load_fingerprint(rdb)?;
            let result = load_buffer(rdb)?;
            crate::node_fence::observe(fence);
            OnceRecord::done(fence, keep_ms, fingerprint.as_deref(), &result)
        }
        _ => None,
    }
}

/// `Some(None)` for no fingerprint; `None` fails the load.
fn load_fingerprint(rdb: *mut raw::RedisModuleIO) -> Option<Option<Box<[u8]>>> {
    match load_unsigned(rdb)? {
        0 => Some(None),
        1 => load_buffer(rdb).map(Some),
        _ => None,
    }
}

pub(super) fn save(rdb: *mut raw::RedisModuleIO, record: &OnceRecord) {
    match record.running_holding() {
        Some(holding) => {
            save_unsigned(rdb, RUNNING);
            save_holding(rdb, holding);
            save_unsigned(rdb, record.keep_ms());
            save_fingerprint(rdb, record.fingerprint());
        }
        None => {
            save_unsigned(rdb, DONE);
            save_unsigned(rdb, record.fence());
            save_unsigned(rdb, record.keep_ms());
            save_fingerprint(rdb, record.fingerprint());
            save_buffer(rdb, record.result().unwrap_or_default());
        }
    }
}

fn save_fingerprint(rdb: *mut raw::RedisModuleIO, fingerprint: Option<&[u8]>) {
    save_unsigned(rdb, u64::from(fingerprint.is_some()));
    if let Some(fingerprint) = fingerprint {
        save_buffer(rdb, fingerprint);
    }
}

/// The arguments of `LOCK.RECORD` after its name: `key`, the state, and the rest
/// (`deadline_ms`: the key's expiry, spelled as `PXAT`).
pub fn record_args(key: &[u8], record: &OnceRecord, deadline_ms: Option<i64>) -> Vec<Vec<u8>> {
    let mut args = vec![key.to_vec()];
    match record.running_holding() {
        Some(holding) => {
            args.push(b"RUNNING".to_vec());
            args.push(holding.token().into_owned());
            args.push(holding.fence().to_string().into_bytes());
        }
        None => {
            args.push(b"DONE".to_vec());
            args.push(record.fence().to_string().into_bytes());
            args.push(record.result().unwrap_or_default().to_vec());
        }
    }
    args.push(b"KEEP".to_vec());
    args.push(record.keep_ms().to_string().into_bytes());
    if let Some(deadline) = deadline_ms {
        args.push(b"PXAT".to_vec());
        args.push(deadline.to_string().into_bytes());
    }
    if let Some(fingerprint) = record.fingerprint() {
        args.push(b"FINGERPRINT".to_vec());
        args.push(fingerprint.to_vec());
    }
    if let Some(session) = record.running_holding().and_then(|h| h.session()) {
        args.push(b"SESSION".to_vec());
        args.push(session.into_owned());
    }
    if let Some(value) = record.running_holding().and_then(|h| h.value()) {
        args.push(b"VALUE".to_vec());
        args.push(value.to_vec());
    }
    args
}

/// Adds what a record is to a digest: equal records digest equal on a primary and its
/// replicas.
pub(super) fn digest(md: *mut raw::RedisModuleDigest, record: &OnceRecord) {
    match record.running_holding() {
        Some(holding) => digest_holding(md, holding),
        None => {
            digest_number(md, i64::try_from(record.fence()).unwrap_or(i64::MAX));
            digest_buffer(md, record.result().unwrap_or_default());
        }
    }
    digest_number(md, i64::try_from(record.keep_ms()).unwrap_or(i64::MAX));
    if let Some(fingerprint) = record.fingerprint() {
        digest_buffer(md, fingerprint);
    }
}
