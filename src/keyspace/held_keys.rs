//! The lock keys held on this server, per database: what `LOCK.TOP` looks at besides
//! the keys clients wait for, so that it never walks the keyspace. A name is added
//! when a holding is written under it (grant, apply, run, load, a lock arriving by
//! `RESTORE`, `RENAME`, `MOVE` or `COPY`) and removed when Redis unlinks the key (any
//! deletion, expiry, eviction or overwrite), or with its database (`FLUSHDB`,
//! `FLUSHALL`); `SWAPDB` swaps two databases' names. A name may stay a moment after its
//! last holder left (a done record, a lock-delay): `LOCK.TOP` opens each key and shows
//! only what holds or is waited for.
//!
//! The index costs about 45 B a held key (`fencelock.track-held-keys`, on by default).
//! Switched off, nothing is noted and the index is dropped at the next grant:
//! `LOCK.TOP` then sees only the keys clients wait for; switched on again, a key held
//! meanwhile is noted at its next grant.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use fencelock_core::capacity::trim;
use redis_module::{Context, RedisString};

use crate::ffi::lock_key::LockKey;
use crate::ffi::server::selected_db;

/// Boxed slices: 16 bytes a slot, not a `Vec`'s 24.
type Names = HashSet<Box<[u8]>, foldhash::fast::RandomState>;

/// The names of each database, by its number (an empty set allocates nothing).
#[derive(Default)]
struct Held(Vec<Names>);

impl Held {
    fn db(&mut self, db: i32) -> Option<&mut Names> {
        self.0.get_mut(usize::try_from(db).ok()?)
    }

    fn db_or_new(&mut self, db: i32) -> Option<&mut Names> {
        let at = usize::try_from(db).ok()?;
        if self.0.len() <= at {
            self.0.resize_with(at + 1, Names::default);
        }
        self.0.get_mut(at)
    }

    fn take(&mut self, db: i32) -> Names {
        self.db(db).map(std::mem::take).unwrap_or_default()
    }
}

thread_local! {
    static HELD: RefCell<Held> = RefCell::new(Held::default());
}

/// `fencelock.track-held-keys`: whether held keys are noted for `LOCK.TOP`.
pub static TRACKING: AtomicBool = AtomicBool::new(true);

fn tracking() -> bool {
    TRACKING.load(Ordering::Relaxed)
}

fn with<T>(f: impl FnOnce(&mut Held) -> T) -> T {
    HELD.with(|held| f(&mut held.borrow_mut()))
}

/// A holding was written under `name` in `db`.
pub fn note(db: i32, name: &[u8]) {
    with(|held| {
        if !tracking() {
            // Switched off: what was noted before goes, once.
            if !held.0.is_empty() {
                held.0 = Vec::new();
            }
            return;
        }
        // One hash: a name already there (one more shared holder) costs a copy.
        if let Some(names) = held.db_or_new(db) {
            names.insert(name.into());
        }
    });
}

/// A key arrived under `name` (`RESTORE`, `RENAME`, `MOVE`, `COPY`): noted if it is a
/// lock.
pub fn note_if_lock(ctx: &Context, name: &[u8]) {
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    if matches!(LockKey::open(ctx, &key_name, false).lock(), Ok(Some(_))) {
        note(selected_db(ctx), name);
    }
}

/// Every lock key a load brought.
pub fn note_loaded(loaded: &[(i32, Vec<u8>)]) {
    for (db, name) in loaded {
        note(*db, name);
    }
}

/// Redis unlinked the lock key `name` of `db`.
pub fn forget(db: i32, name: &[u8]) {
    with(|held| {
        if let Some(names) = held.db(db) {
            // A set that emptied gives its room back, without a table made and freed
            // on every cycle of one lock.
            if names.remove(name) {
                trim(names);
            }
        }
    });
}

/// `FLUSHDB` (`Some(db)`) or `FLUSHALL` (`None`).
pub fn flushed(db: Option<i32>) {
    with(|held| match db {
        Some(db) => drop(held.take(db)),
        None => held.0.clear(),
    });
}

/// `SWAPDB first second`.
pub fn swapped(first: i32, second: i32) {
    // `SWAPDB n n` changes nothing; taking both sides would leave the database empty.
    if first == second {
        return;
    }
    with(|held| {
        let a = held.take(first);
        let b = held.take(second);
        if let Some(names) = held.db_or_new(second) {
            *names = a;
        }
        if let Some(names) = held.db_or_new(first) {
            *names = b;
        }
    });
}

/// The names noted in `db` (a copy: opening a key may unlink it, which forgets it).
pub fn names(db: i32) -> Vec<Vec<u8>> {
    if !tracking() {
        return Vec::new();
    }
    with(|held| {
        held.db(db)
            .map(|names| names.iter().map(|name| name.to_vec()).collect())
            .unwrap_or_default()
    })
}
