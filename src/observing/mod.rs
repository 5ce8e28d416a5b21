//! Clients watching a lock without taking it (`LOCK.OBSERVE … BLOCK`): each is a Redis
//! blocked client that knows a state of the lock (`fence value`) and is answered, once,
//! with the lock's state as soon as it differs.
//!
//! Anything that may change what a lock shows notes its key here (`note_changed`): every
//! write of a lock (`keyspace::effects`), Redis's keyspace events and unlinks of lock
//! keys (`DEL`, expiry, eviction, `RENAME`, `MOVE`, `RESTORE`, an overwrite), flushes,
//! `SWAPDB` and loads (`note_all_changed`) — on a replica, the replicated form of each.
//! The noted keys are looked at before the event loop sleeps (`answer_changed`), after
//! every command, transaction or script of the turn is over, so an observer hears the
//! state a change left, never one half-way through a `MULTI`, and within the same turn
//! (a timer started there would wait for the next wake-up, up to 100 ms on Redis 7.0).
//! Looking can expire a key, as Redis's own expiry cycle does right before; its `DEL`
//! reaches replicas and the AOF (tested). A lease that ends with the
//! key still there (a lock-delay's quarantine, a shared holder's own lease) announces
//! nothing: a timer per observed key (`timers::Recheck`) looks at the key when it next
//! changes by itself, and at the key's expiry, so an expired lease is reported without
//! waiting for Redis's expiry cycle to find the key.
//!
//! Observers live only in module memory (not persisted, not replicated). Exactly one of
//! these ends each: an answer (`answer_changed`), its `BLOCK` timeout (a timer of ours,
//! as for acquires: see `blocking::block_timeouts`), `CLIENT UNBLOCK` or a disconnect
//! (`callbacks`). Redis runs all of them on its main thread; the registry is never
//! borrowed across a call into Redis.

mod callbacks;
mod timers;

pub use callbacks::observed_reply;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use fencelock_core::capacity;
use fencelock_core::lock;
use fencelock_core::observe::{Known, Observed};
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisString};

use crate::ffi::blocked::{self, BlockedClient};
use crate::ffi::lock_key::LockKey;
use crate::ffi::main_thread::MainThread;
use crate::ffi::server::{select_db, slot_served_elsewhere};
use crate::ffi::server_clock;
use crate::ffi::timers::TimerId;
use crate::flagged::{Flagged, Occupied};
use crate::stats;
use callbacks::{Answer, ObserverWaiting};

/// A lock key within one logical database.
type KeyId = (i32, Vec<u8>);

/// One waiting `LOCK.OBSERVE`.
struct Observer {
    client: BlockedClient,
    /// The state it knows; it is answered when the lock's differs.
    known: Known,
    /// Its `BLOCK` timeout, unless it waits without limit.
    timeout: Option<TimerId>,
}

/// The observers of one key.
#[derive(Default)]
struct Watched {
    observers: HashMap<u64, Observer>,
    /// The timer that looks at the key when it next changes by itself, and when.
    recheck: Option<(TimerId, i64)>,
}

#[derive(Default)]
struct Registry {
    keys: HashMap<KeyId, Watched>,
    /// Each blocked observer's key and number (numbers are never reused; handles are).
    clients: HashMap<BlockedClient, (KeyId, u64)>,
    next_number: u64,
    /// Observed keys that may have changed since they were last looked at.
    changed: HashSet<KeyId>,
    /// Every observed key may have changed (a flush, `SWAPDB`, a load).
    all_changed: bool,
}

static REGISTRY: MainThread<RefCell<Registry>> =
    MainThread::new(|| RefCell::new(Registry::default()));

/// Whether any key was observed when the registry was last changed (see `flagged`).
static ANYONE_OBSERVING: AtomicBool = AtomicBool::new(false);

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    REGISTRY.with(|registry| f(&mut Flagged::new(registry.borrow_mut(), &ANYONE_OBSERVING)))
}

impl Occupied for Registry {
    fn occupied(&self) -> bool {
        !self.keys.is_empty()
    }
}

/// Observers waiting for `name` in database `db`.
pub fn count(db: i32, name: &[u8]) -> usize {
    with_registry(|r| {
        r.keys
            .get(&(db, name.to_vec()))
            .map_or(0, |watched| watched.observers.len())
    })
}

/// Observers waiting now, on every key (`fencelock_observers`).
pub fn total() -> usize {
    with_registry(|r| r.clients.len())
}

/// Every key some client observes, as (db, name).
pub fn observed_keys() -> Vec<(i32, Vec<u8>)> {
    with_registry(|r| r.keys.keys().cloned().collect())
}

/// Whether any client observes any key.
pub fn anyone_observing() -> bool {
    ANYONE_OBSERVING.load(Relaxed)
}

/// Something may have changed what `name` in database `db` shows.
pub fn note_changed(db: i32, name: &[u8]) {
    // Every release and unlink comes here; nearly always nobody observes.
    if !anyone_observing() {
        return;
    }
    with_registry(|r| {
        if r.keys.is_empty() {
            return;
        }
        let id = (db, name.to_vec());
        if r.keys.contains_key(&id) {
            r.changed.insert(id);
        }
    });
}

/// Anything may have changed (a flush, `SWAPDB`, a load, a full resynchronisation).
pub fn note_all_changed() {
    with_registry(|r| r.all_changed = !r.keys.is_empty());
}

/// Blocks the calling client until `name` (in the selected database `db`, open as
/// `key`) shows another state than `known`, or `timeout_ms` passes (0: no limit).
/// `false` when Redis refused to block it.
pub fn wait(ctx: &Context, db: i32, key: &LockKey, known: Known, timeout_ms: i64) -> bool {
    let Some(client) = blocked::block::<ObserverWaiting>(ctx) else {
        return false;
    };
    let id: KeyId = (db, key.name().as_slice().to_vec());
    let number = with_registry(|r| {
        let number = r.next_number;
        r.next_number += 1;
        r.clients.insert(client, (id.clone(), number));
        let observer = Observer {
            client,
            known,
            timeout: None,
        };
        r.keys
            .entry(id.clone())
            .or_default()
            .observers
            .insert(number, observer);
        number
    });
    if timeout_ms > 0 {
        let ends_at = server_clock::now_ms().saturating_add(timeout_ms);
        timers::arm_timeout(ctx, &id, client, number, ends_at);
    }
    if let Some(at) = next_change(key, server_clock::command_ms()) {
        timers::arm_recheck(ctx, &id, at);
    }
    true
}

/// Answers the observers of every key noted as changed whose state now differs from
/// what they know. Run before the event loop sleeps.
pub fn answer_changed(ctx: &Context) {
    let ids: Vec<KeyId> = with_registry(|r| {
        if std::mem::take(&mut r.all_changed) {
            r.changed.clear();
            r.keys.keys().cloned().collect()
        } else {
            r.changed.drain().collect()
        }
    });
    for id in ids {
        answer_key(ctx, &id);
    }
}

/// Looks at the key `id` and answers each of its observers that knows another state;
/// the rest are looked at again when the key next changes by itself.
fn answer_key(ctx: &Context, id: &KeyId) {
    if !with_registry(|r| r.keys.contains_key(id)) || !select_db(ctx, id.0) {
        return;
    }
    // Gone with a slot this node lost (Redis 7.0 deletes such keys without an event):
    // nobody here knows who holds it now.
    if slot_served_elsewhere(ctx, &id.1) {
        key_moved(ctx, id.0, &id.1);
        return;
    }
    let name = RedisString::create_from_slice(ctx.ctx, &id.1);
    let key = LockKey::open(ctx, &name, false);
    let now_ms = server_clock::command_ms();
    // A key that holds another type now: every observer hears `WRONGTYPE`, as a new
    // `LOCK.OBSERVE` of it would.
    let current = key.lock().map(|lock| Observed::of(lock, now_ms)).ok();
    let next = next_change(&key, now_ms);
    drop(key);
    let answered = with_registry(|r| {
        let Some(watched) = r.keys.get_mut(id) else {
            return Vec::new();
        };
        let differing: Vec<u64> = watched
            .observers
            .iter()
            .filter(|(_, observer)| !current.as_ref().is_some_and(|c| c.is(&observer.known)))
            .map(|(number, _)| *number)
            .collect();
        let answered: Vec<Observer> = differing
            .iter()
            .filter_map(|number| watched.observers.remove(number))
            .collect();
        for observer in &answered {
            r.clients.remove(&observer.client);
        }
        answered
    });
    for observer in answered {
        timers::disarm_timeout(ctx, observer.timeout);
        stats::OBSERVED.bump();
        let answer = match &current {
            Some(current) => Answer::Changed(current.clone()),
            None => Answer::WrongType,
        };
        blocked::unblock::<ObserverWaiting>(observer.client, Some(answer));
    }
    forget_if_unobserved(ctx, id);
    if let Some(at) = next {
        timers::arm_recheck(ctx, id, at);
    }
}

/// `name` moved to another node (`MIGRATE`): what it shows here no longer says who
/// holds it, so each of its observers is told to retry there (`TRYAGAIN`).
pub fn key_moved(ctx: &Context, db: i32, name: &[u8]) {
    let id: KeyId = (db, name.to_vec());
    let Some(watched) = with_registry(|r| {
        let watched = r.keys.remove(&id)?;
        r.changed.remove(&id);
        for observer in watched.observers.values() {
            r.clients.remove(&observer.client);
        }
        Some(watched)
    }) else {
        return;
    };
    if let Some((timer, _)) = watched.recheck {
        timers::stop_recheck(ctx, timer);
    }
    with_registry(|r| capacity::trim(&mut r.clients));
    for observer in watched.observers.into_values() {
        timers::disarm_timeout(ctx, observer.timeout);
        blocked::unblock::<ObserverWaiting>(observer.client, Some(Answer::Moved));
    }
}

/// Takes `client` out of the registry (a timeout, `CLIENT UNBLOCK`, a disconnect);
/// `false` when it was not waiting (already answered).
fn remove(ctx: &Context, client: BlockedClient, number: Option<u64>) -> bool {
    let removed = with_registry(|r| {
        let (id, found) = r.clients.get(&client)?.clone();
        if number.is_some_and(|number| number != found) {
            return None;
        }
        r.clients.remove(&client);
        let observer = r.keys.get_mut(&id)?.observers.remove(&found)?;
        Some((id, observer))
    });
    let Some((id, observer)) = removed else {
        return false;
    };
    timers::disarm_timeout(ctx, observer.timeout);
    forget_if_unobserved(ctx, &id);
    true
}

/// A key nobody observes any more is forgotten, with its recheck timer; tables that
/// mostly emptied give their room back (10,000 observers gone leave no 10,000 slots).
fn forget_if_unobserved(ctx: &Context, id: &KeyId) {
    let recheck = with_registry(|r| {
        capacity::trim(&mut r.clients);
        let watched = r.keys.get_mut(id)?;
        capacity::trim(&mut watched.observers);
        if !watched.observers.is_empty() {
            return None;
        }
        r.changed.remove(id);
        let recheck = r.keys.remove(id).and_then(|watched| watched.recheck);
        capacity::trim(&mut r.keys);
        capacity::trim(&mut r.changed);
        recheck
    });
    if let Some((timer, _)) = recheck {
        timers::stop_recheck(ctx, timer);
    }
}

/// When what `key` shows next changes by itself: its expiry, a shared holder's lease
/// end, or an exclusive lease end a lock-delay outlasts.
fn next_change(key: &LockKey, now_ms: i64) -> Option<i64> {
    let expires_at = key
        .remaining_ms()
        .map(|remaining| now_ms.saturating_add(remaining));
    // A lease end counts as a holder's: the lock shows it through its millisecond.
    let lease_ends_at = match key.lock() {
        Ok(Some(LockRef::Shared(set))) => set.next_lease_end(now_ms),
        Ok(Some(LockRef::Exclusive(holding))) => holding.lease_end_ms(),
        _ => None,
    };
    lock::next_change(expires_at, lease_ends_at.filter(|&end| end != i64::MAX))
}
