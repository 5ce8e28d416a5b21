//! `LOCK.TOP [COUNT n] [BY waiters|held]` → up to n (default 10) entries `[key, waiters,
//! longest-wait-ms, held-ms]` of the selected database on this server, the most
//! waited-for first, or (`BY held`) the longest held. Looks only at the keys the module
//! keeps track of, those held (`keyspace::held_keys`) and those waited for (the wait
//! registry): never a walk of the keyspace. A key the calling user may not read is left
//! out. `held-ms` of a shared lock or semaphore is its oldest holder's; 0 without a
//! holder, as `longest-wait-ms` is without waiters. Never shows a token. Read-only and
//! keyless: in a cluster each primary answers for its own keys.

use std::collections::{HashMap, HashSet};

use fencelock_core::top::{self, Entry};
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::durations::held_for_us;
use crate::ffi::acl::CallingUser;
use crate::ffi::argv::Command;
use crate::ffi::lock_key::LockKey;
use crate::ffi::server::selected_db;
use crate::ffi::server_clock;
use crate::keyspace::held_keys;

pub struct Top;

impl Command for Top {
    const NAME: &'static str = "lock.top";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let rest: Vec<&[u8]> = args.iter().skip(1).map(RedisString::as_slice).collect();
        let request = top::parse(&rest).map_err(to_redis)?;
        let entries = top::rank(entries(ctx), request);
        Ok(RedisValue::Array(entries.into_iter().map(reply).collect()))
    }
}

/// One entry per key held or waited for in the selected database that the caller may
/// read, with its waiters and holding now.
fn entries(ctx: &Context) -> Vec<Entry> {
    let db = selected_db(ctx);
    let now_us = server_clock::now_micros();
    let mut waited: HashMap<Vec<u8>, (usize, u64)> = blocking::queued_keys(db)
        .into_iter()
        .map(|(name, waiters, since_us)| (name, (waiters, since_us)))
        .collect();
    let mut names: HashSet<Vec<u8>> = held_keys::names(db).into_iter().collect();
    names.extend(waited.keys().cloned());
    let user = CallingUser::of(ctx);
    names
        .into_iter()
        .filter(|name| user.as_ref().is_none_or(|user| user.may_read(name)))
        .filter_map(|name| {
            let (waiters, since_us) = waited.remove(&name).unwrap_or((0, now_us));
            let held_since = oldest_fence(ctx, &name);
            if waiters == 0 && held_since.is_none() {
                return None;
            }
            Some(Entry {
                waiters,
                longest_wait_ms: held_for_us(since_us, now_us) / 1000,
                held_ms: held_since.map_or(0, |fence| held_for_us(fence, now_us) / 1000),
                key: name,
            })
        })
        .collect()
}

/// The fence of the oldest live holding of `name` (a fence is the server's µs clock at
/// its grant), if anybody holds it.
fn oldest_fence(ctx: &Context, name: &[u8]) -> Option<u64> {
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &key_name, false);
    let now_ms = server_clock::command_ms();
    match key.lock().ok()?? {
        LockRef::Exclusive(held) => Some(held.fence()),
        LockRef::Shared(set) => set
            .all()
            .filter(|holder| holder.is_live(now_ms))
            .map(|holder| holder.holding().fence())
            .min(),
        LockRef::Quarantined(_) => None,
    }
}

fn reply(entry: Entry) -> RedisValue {
    let integer = |n: u64| RedisValue::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    RedisValue::Array(vec![
        RedisValue::StringBuffer(entry.key),
        integer(u64::try_from(entry.waiters).unwrap_or(u64::MAX)),
        integer(entry.longest_wait_ms),
        integer(entry.held_ms),
    ])
}
