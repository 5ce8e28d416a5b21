//! Shared holders leave when their own lease ends, even when nobody touches the lock:
//! each shared lock whose earliest holder lease ends before the key's own expiry (the
//! latest lease, which Redis handles) gets one timer at that earliest end. It drops the
//! ended holders (`lock.expired` for each, `LOCK.DROP` to replicas), hands the room to
//! the queue, and arms itself for the next earliest end. A lock has at most one such
//! timer; one that fires after the lock changed simply finds nothing to drop.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use fencelock_core::capacity::trim;
use redis_module::{Context, RedisString};

use super::timers::PAUSED_RETRY_MS;
use super::{hand_off, KeyId};
use crate::ffi::lock_key::LockKey;
use crate::ffi::main_thread::MainThread;
use crate::ffi::server::{select_db, selected_db, writes, Writes};
use crate::ffi::server_clock;
use crate::ffi::timers::{self, Timer, TimerId};
use crate::keyspace::effects;

/// How often a replica looks again at a shared lock whose holder's lease ended.
const REPLICA_RETRY_MS: i64 = 1_000;

/// The armed timers of one database's watched locks, by name: when each fires, and its
/// id.
type ArmedInDb = HashMap<Vec<u8>, (i64, TimerId)>;

/// Armed timers by database, then name (two levels, so that a grant looks its name up
/// without copying it).
static ARMED: MainThread<RefCell<HashMap<i32, ArmedInDb>>> =
    MainThread::new(|| RefCell::new(HashMap::new()));
/// Watched locks Redis unlinked since the event loop last slept: their timers are stopped
/// then, unless the name is a shared lock again.
static UNLINKED: MainThread<RefCell<Vec<KeyId>>> = MainThread::new(|| RefCell::new(Vec::new()));

/// When the armed timer of `name` in `db` fires, if one is armed.
fn armed_at(db: i32, name: &[u8]) -> Option<i64> {
    ARMED.with(|armed| {
        let armed = armed.borrow();
        // Most servers follow no lease end at all: spare them the lookup.
        if armed.is_empty() {
            return None;
        }
        armed
            .get(&db)
            .and_then(|names| names.get(name))
            .map(|(at, _)| *at)
    })
}

/// A shared lock (`key`, in the selected database) was written: make sure a timer fires
/// when its earliest holder's lease ends, unless the key's own expiry comes first (it
/// takes every holder with it). A key without expiry (`PERSIST`) is always watched, so
/// it still goes with its last holder. The set remembers its timer (`watched_at`), so a
/// grant to a watched lock looks nothing up.
pub fn watch(ctx: &Context, key: &mut LockKey) {
    let Some(earliest) = key
        .shared_mut()
        .filter(|set| set.watched_at().is_none())
        .and_then(|set| set.earliest_deadline())
    else {
        return;
    };
    // The key's absolute expiry: a wall-clock now plus what Redis says is left (judged
    // by the time the command started) would place it later by however long the command
    // has run, and arm a timer for every lock a long command touches (`LOCK.KEEPALIVE`
    // of thousands of holdings: Redis 7.2 and later insert each at the same
    // millisecond, one slot further each time).
    if key.deadline_ms().is_some_and(|at| at <= earliest) {
        return;
    }
    // A holder holds through its deadline's millisecond; it has ended one later.
    let fires_at = arm(
        ctx,
        selected_db(ctx),
        key.name().as_slice(),
        earliest.saturating_add(1),
    );
    if let Some(set) = key.shared_mut() {
        set.set_watched_at(Some(fires_at));
    }
}

/// Redis made `name` permanent (`PERSIST`), wrote it anew (`RESTORE`) or moved it
/// here (`RENAME`): if it is a shared lock, its holders' own lease ends must be kept,
/// under this name (a timer the set remembers may be armed under the old one).
pub fn follow_anew(ctx: &Context, name: &[u8]) {
    let name = RedisString::create_from_slice(ctx.ctx, name);
    let mut key = LockKey::open(ctx, &name, false);
    if let Some(set) = key.shared_mut() {
        set.set_watched_at(None);
    }
    watch(ctx, &mut key);
}

/// A load brought these shared locks: follow their holders' lease ends.
pub fn follow_loaded(ctx: &Context, loaded: Vec<KeyId>) {
    for (db, name) in loaded {
        if select_db(ctx, db) {
            follow_anew(ctx, &name);
        }
    }
}

/// Ensures a timer for `name` fires by `fires_at`; returns when the armed one fires.
fn arm(ctx: &Context, db: i32, name: &[u8], fires_at: i64) -> i64 {
    if let Some(at) = armed_at(db, name).filter(|at| *at <= fires_at) {
        return at;
    }
    let delay = u64::try_from(fires_at.saturating_sub(server_clock::now_ms())).unwrap_or(0);
    let check = HolderLeaseEnd {
        id: (db, name.to_vec()),
        fires_at,
    };
    let timer = timers::start(ctx, Duration::from_millis(delay), check);
    let replaced = ARMED.with(|armed| {
        let mut armed = armed.borrow_mut();
        armed
            .entry(db)
            .or_default()
            .insert(name.to_vec(), (fires_at, timer))
    });
    if let Some((_, old)) = replaced {
        drop(timers::stop::<HolderLeaseEnd>(ctx, old));
    }
    fires_at
}

/// Forgets the armed timer of `name` in `db` and stops it.
fn disarm(ctx: &Context, db: i32, name: &[u8]) {
    let removed = ARMED.with(|armed| {
        let mut armed = armed.borrow_mut();
        let names = armed.get_mut(&db)?;
        let removed = names.remove(name);
        trim(names);
        if names.is_empty() {
            armed.remove(&db);
        }
        removed
    });
    if let Some((_, timer)) = removed {
        drop(timers::stop::<HolderLeaseEnd>(ctx, timer));
    }
}

/// Redis unlinked the lock `name` in `db` (deleted, expired, evicted, overwritten,
/// renamed or moved away; no context at hand): if a timer follows it, it is looked at
/// before the server sleeps.
pub(super) fn note_unlinked(db: i32, name: &[u8]) {
    if armed_at(db, name).is_some() {
        UNLINKED.with(|unlinked| unlinked.borrow_mut().push((db, name.to_vec())));
    }
}

/// Stops the timers of the unlinked locks whose names hold no shared lock any more: a
/// lock released, deleted or moved early does not keep its timer until the earliest
/// lease would have ended.
pub(super) fn stop_unlinked(ctx: &Context) {
    let unlinked = UNLINKED.with(|unlinked| std::mem::take(&mut *unlinked.borrow_mut()));
    for (db, name) in unlinked {
        if !select_db(ctx, db) {
            continue;
        }
        let key_name = RedisString::create_from_slice(ctx.ctx, &name);
        if LockKey::open(ctx, &key_name, false).shared_mut().is_none() {
            disarm(ctx, db, &name);
        }
    }
}

/// `SWAPDB first second`: the watched locks of each database are in the other now, and
/// are followed there (same ends, new timers).
pub(super) fn swapped(ctx: &Context, first: i32, second: i32) {
    let taken = ARMED.with(|armed| {
        let mut armed = armed.borrow_mut();
        [(first, second), (second, first)].map(|(from, to)| (to, armed.remove(&from)))
    });
    for (to, names) in taken {
        for (name, (fires_at, timer)) in names.into_iter().flatten() {
            drop(timers::stop::<HolderLeaseEnd>(ctx, timer));
            arm(ctx, to, &name, fires_at);
        }
    }
}

/// On a replica: while `name` is a shared lock, look at it again at its next lease end,
/// at most once a second; a key that went (the primary's `LOCK.DROP`s and `DEL`) is no
/// longer followed.
fn follow_on_replica(ctx: &Context, db: i32, name: &[u8]) {
    if !select_db(ctx, db) {
        return;
    }
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let mut key = LockKey::open(ctx, &key_name, false);
    let Some(set) = key.shared_mut() else {
        return;
    };
    // Remembered as unwatched: the timer below may fire after a holder's end, which a
    // remembered one never does (see `SharedHolders::watched_at`).
    set.set_watched_at(None);
    if let Some(earliest) = set.earliest_deadline() {
        let next = server_clock::now_ms().saturating_add(REPLICA_RETRY_MS);
        arm(ctx, db, name, next.max(earliest.saturating_add(1)));
    }
}

/// The end of a shared holder's lease.
struct HolderLeaseEnd {
    id: KeyId,
    fires_at: i64,
}

impl Timer for HolderLeaseEnd {
    const NAME: &'static str = "a shared holder's lease end";

    fn fire(self, ctx: &Context) {
        let (db, name) = &self.id;
        if armed_at(*db, name) != Some(self.fires_at) {
            return;
        }
        ARMED.with(|armed| {
            let mut armed = armed.borrow_mut();
            if let Some(names) = armed.get_mut(db) {
                names.remove(name.as_slice());
                trim(names);
                if names.is_empty() {
                    armed.remove(db);
                }
            }
        });
        match writes(ctx) {
            Writes::Allowed => {}
            Writes::Paused => {
                // The set keeps remembering a timer: this one, a little later.
                let retry = server_clock::now_ms().saturating_add(PAUSED_RETRY_MS);
                arm(ctx, *db, name, retry);
                return;
            }
            // A replica follows its primary's `LOCK.DROP`s; it looks again now and then,
            // so that once promoted it drops what ended by itself.
            Writes::Replica => {
                follow_on_replica(ctx, *db, name);
                return;
            }
        }
        if !select_db(ctx, *db) {
            return;
        }
        let name = RedisString::create_from_slice(ctx.ctx, name);
        let mut key = LockKey::open(ctx, &name, true);
        if let Some(set) = key.shared_mut() {
            set.set_watched_at(None);
        }
        // A failed drop leaves the ended holders counted as gone by every decision.
        let _ = effects::drop_ended(ctx, &mut key, server_clock::now_ms());
        hand_off(ctx, &mut key);
        watch(ctx, &mut key);
    }
}
