//! `LOCK.TOP [COUNT n] [BY waiters|held]` → up to n (default 10) entries `[key, waiters,
//! longest-wait-ms, held-ms]` of the selected database on this server, the most
//! waited-for first, or (`BY held`) the longest held. Looks only at the keys the module
//! keeps track of, those held (`keyspace::held_keys`) and those waited for (the wait
//! registry): never a walk of the keyspace. A key the calling user may not read is left
//! out. `held-ms` of a shared lock or semaphore is its oldest holder's; 0 without a
//! holder, as `longest-wait-ms` is without waiters. Never shows a token. Read-only and
//! keyless: in a cluster each primary answers for its own keys.

use std::collections::HashSet;

use fencelock_core::top::{self, Entry, TopRequest};
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::durations::held_for_us;
use crate::ffi::acl::CallingUser;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys};
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
        let entries = listing(ctx, request);
        Ok(RedisValue::Array(entries.into_iter().map(reply).collect()))
    }
}

/// Keyless (`Keys::Declared` with none): each node answers for its own keys, and the
/// ACL filters keys in the reply rather than refusing the command.
pub const SPEC: CommandSpec = CommandSpec {
    name: Top::NAME,
    entry: Some(entry::<Top>),
    flags: c"readonly",
    categories: "read",
    replication_form: false,
    summary: "Lists the most waited-for (or longest held) locks of this server: [key, waiters, longest-wait-ms, held-ms] each.",
    since: c"0.4.0",
    complexity: c"O(N + W + C log C): N keys held, W waited for, C the count",
    arity: -1,
    keys: Keys::Declared,
};

/// The listing of the selected database: every key clients wait for (the contended
/// ones, few) is looked at; of the keys only held, those the index of held keys ranks
/// first by how long they may have been held, more of them only while a key not looked
/// at could still come before the last one listed. So `COUNT 1` opens a key or two,
/// not every held key.
fn listing(ctx: &Context, request: TopRequest) -> Vec<Entry> {
    let db = selected_db(ctx);
    let now_us = server_clock::now_micros();
    let user = CallingUser::of(ctx);
    let readable = |name: &[u8]| user.as_ref().is_none_or(|user| user.may_read(name));
    let waited: Vec<(Vec<u8>, usize, u64)> = blocking::queued_keys(db);
    let waited_names: HashSet<&[u8]> = waited.iter().map(|(name, ..)| name.as_slice()).collect();
    let waited_entries: Vec<Entry> = waited
        .iter()
        .filter(|(name, ..)| readable(name))
        .filter_map(|(name, waiters, since_us)| {
            line_of(ctx, db, name, (*waiters, *since_us), now_us)
        })
        .collect();
    let mut want = request
        .count
        .saturating_add(waited.len())
        .max(MIN_LOOKED_AT);
    loop {
        let (oldest, all) = held_keys::oldest(db, now_us, want);
        let held_entries = oldest
            .iter()
            .filter(|(_, name)| !waited_names.contains(name.as_slice()) && readable(name))
            .filter_map(|(_, name)| line_of(ctx, db, name, (0, now_us), now_us));
        let ranked = top::rank(
            waited_entries.iter().cloned().chain(held_entries).collect(),
            request,
        );
        let boundary = oldest
            .last()
            .map(|(age_ms, name)| (*age_ms, name.as_slice()));
        if all || boundary.is_none_or(|boundary| top::settled(&ranked, request, boundary)) {
            return ranked;
        }
        want = want.saturating_mul(4);
    }
}

/// Held keys looked at, at least, in a listing.
const MIN_LOOKED_AT: usize = 16;

/// `name`'s line with its `(waiters, waiting since µs)`, if anybody holds it or waits.
fn line_of(
    ctx: &Context,
    db: i32,
    name: &[u8],
    (waiters, waiting_since_us): (usize, u64),
    now_us: u64,
) -> Option<Entry> {
    let held_since = held_since(ctx, db, name, now_us);
    if waiters == 0 && held_since.is_none() {
        return None;
    }
    Some(Entry {
        waiters,
        longest_wait_us: held_for_us(waiting_since_us, now_us),
        held_us: held_since.map_or(0, |since| held_for_us(since, now_us)),
        key: name.to_vec(),
    })
}

/// When the current holding of `name` began (µs on this server's wall clock), if
/// anybody holds it: an exclusive holding's start as noted at its grant, else its
/// fence (the granting server's clock in µs); a shared lock's oldest live holder's
/// fence. A fence ahead of the clock (the fence clock jumped ahead of it) is no time:
/// the start noted by the index of held keys stands for it.
fn held_since(ctx: &Context, db: i32, name: &[u8], now_us: u64) -> Option<u64> {
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &key_name, false);
    let now_ms = server_clock::command_ms();
    let noted = held_keys::noted(db, name).map(|noted| noted.since_us);
    let noted = noted.filter(|since| *since != held_keys::UNKNOWN_SINCE);
    match key.lock().ok()?? {
        LockRef::Exclusive(held) => Some(noted.unwrap_or(held.fence().min(now_us))),
        LockRef::Shared(set) => set
            .all()
            .filter(|holder| holder.is_live(now_ms))
            .map(|holder| holder.holding().fence())
            .min()
            .map(|fence| match noted {
                Some(since) if fence > now_us => since,
                _ => fence.min(now_us),
            }),
        LockRef::Quarantined(_) => None,
    }
}

fn reply(entry: Entry) -> RedisValue {
    let integer = |n: u64| RedisValue::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    RedisValue::Array(vec![
        RedisValue::StringBuffer(entry.key),
        integer(u64::try_from(entry.waiters).unwrap_or(u64::MAX)),
        integer(entry.longest_wait_us / 1000),
        integer(entry.held_us / 1000),
    ])
}
