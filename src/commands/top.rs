//! `LOCK.TOP [COUNT n] [BY waiters|held]` → up to n (default 10) entries `[key, waiters,
//! longest-wait-ms, held-ms]` of the selected database on this server, the most
//! waited-for first, or (`BY held`) the longest held. Looks only at the keys the module
//! keeps track of, those held (`keyspace::held_keys`) and those waited for (the wait
//! registry): never a walk of the keyspace. A key the calling user may not read is left
//! out. `held-ms` of a shared lock or semaphore is its oldest live holder's; 0 without a
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
    complexity: c"O(K + W + C log C): K held keys looked at (a few for COUNT 1), W waited for, C the count",
    arity: -1,
    keys: Keys::Declared,
};

/// The listing of the selected database: every key clients wait for (the contended
/// ones, few) is looked at; then the held keys, the oldest holding first, only while a
/// key not looked at yet could still come before the last one listed. So `COUNT 1`
/// opens a key or two, not every held key, whatever holders left before and wherever
/// the fence clock is.
fn listing(ctx: &Context, request: TopRequest) -> Vec<Entry> {
    let db = selected_db(ctx);
    let now_us = server_clock::now_micros();
    let user = CallingUser::of(ctx);
    let readable = |name: &[u8]| user.as_ref().is_none_or(|user| user.may_read(name));
    let waited: Vec<(Vec<u8>, usize, u64)> = blocking::queued_keys(db);
    let mut listed = Listed {
        entries: waited
            .iter()
            .filter(|(name, ..)| readable(name))
            .filter_map(|(name, waiters, since_us)| {
                line_of(ctx, name, (*waiters, *since_us), now_us)
            })
            .collect(),
        seen: waited.into_iter().map(|(name, ..)| name).collect(),
    };
    // Two streams, each oldest first then by name: the log in grant order (an entry
    // starts at its fence or later) and the starts kept apart, of holdings whose fence
    // was ahead of the clock (every grant after a jump of the fence clock).
    let mut next_log = held_keys::next_noted(db, None);
    let mut next_ahead = held_keys::next_started_ahead(db, None);
    // Checked for the end once this many keys are listed, then twice as many, ...: a
    // ranking per key looked at would cost more than the keys.
    let mut check_at = listed.entries.len().saturating_add(request.count);
    loop {
        let from_log = next_log
            .as_ref()
            .map(|(fence, name)| (*fence, name.as_slice()));
        let from_ahead = next_ahead
            .as_ref()
            .map(|(_, since, name, _)| (*since, name.as_slice()));
        let earliest = match (from_log, from_ahead) {
            (None, None) => return top::rank(listed.entries, request),
            (Some(next), None) | (None, Some(next)) => next,
            (Some(log), Some(ahead)) => log.min(ahead),
        };
        if listed.entries.len() >= check_at {
            // Every key not looked at yet began at `earliest` or later (or then, with a
            // later name).
            let boundary = (now_us.saturating_sub(earliest.0), earliest.1);
            let ranked = top::rank(listed.entries.clone(), request);
            if top::settled(&ranked, request, boundary) {
                return ranked;
            }
            check_at = check_at.saturating_mul(2);
        }
        if from_ahead == Some(earliest) {
            if let Some(started) = next_ahead.take() {
                let (_, _, name, fence) = &started;
                listed.look_at(ctx, db, name, *fence, readable(name), now_us);
                next_ahead = held_keys::next_started_ahead(db, Some(&started));
            }
        } else if let Some((fence, name)) = next_log.take() {
            listed.look_at(ctx, db, &name, fence, readable(&name), now_us);
            next_log = held_keys::next_noted(db, Some((fence, &name)));
        }
    }
}

/// The lines so far, and the keys done with (listed, waited for, or not readable).
struct Listed {
    entries: Vec<Entry>,
    seen: HashSet<Vec<u8>>,
}

impl Listed {
    /// The key of a noted holding, at its first live entry (its oldest holding noted):
    /// listed if anybody holds it; looked at again at its next entry only if the key
    /// did not have this one.
    fn look_at(
        &mut self,
        ctx: &Context,
        db: i32,
        name: &[u8],
        fence: u64,
        readable: bool,
        now_us: u64,
    ) {
        if self.seen.contains(name) {
            return;
        }
        if !readable {
            self.seen.insert(name.to_vec());
            return;
        }
        match held_line(ctx, db, name, fence, now_us) {
            Some(Some(entry)) => {
                self.entries.push(entry);
                self.seen.insert(name.to_vec());
            }
            Some(None) => {
                self.seen.insert(name.to_vec());
            }
            None => {}
        }
    }
}

/// The line of a key only held, looked at for its holding `fence`: `None` if the key
/// does not have it (its entry goes), else its line if anybody holds it.
fn held_line(
    ctx: &Context,
    db: i32,
    name: &[u8],
    fence: u64,
    now_us: u64,
) -> Option<Option<Entry>> {
    match held_since(ctx, name, Some(fence), now_us) {
        Look::Missing => {
            held_keys::gone(db, name, fence);
            None
        }
        Look::Nothing => Some(None),
        Look::Since(since_us) => Some(Some(Entry {
            waiters: 0,
            longest_wait_us: 0,
            held_us: held_for_us(since_us, now_us),
            key: name.to_vec(),
        })),
    }
}

/// The line of a key clients wait for: its `(waiters, waiting since µs)` and how
/// long it has been held (0 if nobody holds it); `None` if nobody waits or holds.
fn line_of(
    ctx: &Context,
    name: &[u8],
    (waiters, waiting_since_us): (usize, u64),
    now_us: u64,
) -> Option<Entry> {
    let held_since = match held_since(ctx, name, None, now_us) {
        Look::Since(since_us) => Some(since_us),
        Look::Nothing | Look::Missing => None,
    };
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

/// What a key holds, looked at for one of its holdings (or for none).
enum Look {
    /// Held since (µs on this server's wall clock), at that holding if one was asked.
    Since(u64),
    /// Nobody holds it.
    Nothing,
    /// The key does not have the holding asked.
    Missing,
}

/// When the current holding of `name` began, if anybody holds it: an exclusive
/// holding's start, a shared lock's oldest live holder's (each holding's start is its
/// fence, unless the fence was ahead of the clock: see `held_keys::since_of`).
fn held_since(ctx: &Context, name: &[u8], fence: Option<u64>, now_us: u64) -> Look {
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &key_name, false);
    let now_ms = server_clock::command_ms();
    let lock = match key.lock() {
        Ok(Some(lock)) => lock,
        _ => return Look::Missing,
    };
    match lock {
        LockRef::Exclusive(held) if fence.is_none_or(|fence| fence == held.fence()) => {
            Look::Since(held_keys::since_of(held.fence()).min(now_us))
        }
        LockRef::Exclusive(_) => Look::Missing,
        LockRef::Shared(set) => {
            if let Some(fence) = fence {
                if !set.all().any(|holder| holder.holding().fence() == fence) {
                    return Look::Missing;
                }
            }
            let oldest = set
                .all()
                .filter(|holder| holder.is_live(now_ms))
                .map(|holder| held_keys::since_of(holder.holding().fence()).min(now_us))
                .min();
            oldest.map_or(Look::Nothing, Look::Since)
        }
        LockRef::Quarantined(held) if fence.is_none_or(|fence| fence == held.fence()) => {
            Look::Nothing
        }
        LockRef::Quarantined(_) => Look::Missing,
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
