//! The lock keys held on this server, per database: what `LOCK.TOP` looks at besides
//! the keys clients wait for, so that it never walks the keyspace. A name is added
//! when a holding is written under it (grant, apply, run, load, a lock arriving by
//! `RESTORE`, `RENAME`, `MOVE` or `COPY`) and removed when Redis unlinks the key (any
//! deletion, expiry, eviction or overwrite), or with its database (`FLUSHDB`,
//! `FLUSHALL`); `SWAPDB` swaps two databases' names. A name may stay a moment after its
//! last holder left (a done record, a lock-delay): `LOCK.TOP` opens each key and shows
//! only what holds or is waited for.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use redis_module::{Context, RedisString};

use crate::ffi::lock_key::LockKey;
use crate::ffi::server::selected_db;

type Names = HashSet<Vec<u8>>;

thread_local! {
    static HELD: RefCell<HashMap<i32, Names>> = RefCell::new(HashMap::new());
}

fn with<T>(f: impl FnOnce(&mut HashMap<i32, Names>) -> T) -> T {
    HELD.with(|held| f(&mut held.borrow_mut()))
}

/// A holding was written under `name` in `db`.
pub fn note(db: i32, name: &[u8]) {
    with(|held| {
        let names = held.entry(db).or_default();
        if !names.contains(name) {
            names.insert(name.to_vec());
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
        if let Some(names) = held.get_mut(&db) {
            names.remove(name);
            if names.is_empty() {
                held.remove(&db);
            }
        }
    });
}

/// `FLUSHDB` (`Some(db)`) or `FLUSHALL` (`None`).
pub fn flushed(db: Option<i32>) {
    with(|held| match db {
        Some(db) => {
            held.remove(&db);
        }
        None => held.clear(),
    });
}

/// `SWAPDB first second`.
pub fn swapped(first: i32, second: i32) {
    with(|held| {
        let a = held.remove(&first);
        let b = held.remove(&second);
        if let Some(a) = a {
            held.insert(second, a);
        }
        if let Some(b) = b {
            held.insert(first, b);
        }
    });
}

/// The names noted in `db` (a copy: opening a key may unlink it, which forgets it).
pub fn names(db: i32) -> Vec<Vec<u8>> {
    with(|held| {
        held.get(&db)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    })
}
