//! The server's index of sessions (see `fencelock_core::session_index`): which keys
//! may hold each session's holdings. Every write of a holding with a session adds to it
//! (`effects`), every key that arrives with one (a load, `RESTORE`, `RENAME`, `MOVE`,
//! `COPY`) too (`hooks`); a key Redis unlinks is forgotten for the sessions it held,
//! and whoever reads the index checks each key and forgets what it no longer finds.

use std::borrow::Cow;
use std::cell::RefCell;

use fencelock_core::session_index::SessionIndex;
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisString};

use crate::ffi::lock_key::LockKey;
use crate::ffi::main_thread::MainThread;
use crate::ffi::server::{select_db, selected_db};

/// A key within one logical database, as the index keeps it.
pub type SessionKey = (i32, Box<[u8]>);

static INDEX: MainThread<RefCell<SessionIndex<SessionKey>>> =
    MainThread::new(|| RefCell::new(SessionIndex::default()));

fn with_index<T>(f: impl FnOnce(&mut SessionIndex<SessionKey>) -> T) -> T {
    INDEX.with(|index| f(&mut index.borrow_mut()))
}

/// The distinct sessions of a lock's holdings (whatever their leases).
pub fn sessions_of(lock: LockRef<'_>) -> Vec<Cow<'_, [u8]>> {
    let mut sessions: Vec<Cow<[u8]>> = match lock {
        LockRef::Exclusive(holding) | LockRef::Quarantined(holding) => {
            holding.session().into_iter().collect()
        }
        LockRef::Shared(set) => set
            .all()
            .filter_map(|holder| holder.holding().session())
            .collect(),
    };
    sessions.sort_unstable();
    sessions.dedup();
    sessions
}

/// `name` in `db` holds something of `session` now.
pub fn note(db: i32, name: &[u8], session: &[u8]) {
    with_index(|index| index.add(session, &(db, name.into())));
}

/// Indexes every session of the lock `name` (in the selected database), if it is one.
pub fn index_key(ctx: &Context, name: &[u8]) {
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &key_name, false);
    let Ok(Some(lock)) = key.lock() else {
        return;
    };
    let db = selected_db(ctx);
    for session in sessions_of(lock) {
        note(db, name, &session);
    }
}

/// A load brought these locks: index their sessions.
pub fn index_loaded(ctx: &Context, loaded: &[(i32, Vec<u8>)]) {
    for (db, name) in loaded {
        if select_db(ctx, *db) {
            index_key(ctx, name);
        }
    }
}

/// Redis unlinked the lock `name` in `db`: its sessions no longer hold it.
pub fn unlinked(db: i32, name: &[u8], lock: LockRef) {
    // Every release of a plain lock comes here: a holding of no session has nothing to
    // forget, and is told apart without gathering the sessions.
    if let LockRef::Exclusive(holding) | LockRef::Quarantined(holding) = lock {
        if holding.session().is_none() {
            return;
        }
    }
    let sessions = sessions_of(lock);
    if sessions.is_empty() {
        return;
    }
    let key: SessionKey = (db, name.into());
    with_index(|index| {
        for session in &sessions {
            index.forget(session, &key);
        }
    });
}

/// `key` was found holding nothing of `session`.
pub fn forget(session: &[u8], key: &SessionKey) {
    with_index(|index| index.forget(session, key));
}

/// The keys that may hold holdings of `session`, to be checked one by one.
pub fn keys_of(session: &[u8]) -> Vec<SessionKey> {
    let mut keys = with_index(|index| index.keys(session));
    // One order whatever the hash: replies and effects are the same on every run.
    keys.sort_unstable();
    keys
}

/// Whether `session` may hold anything on this server (the index has a key for it).
pub fn may_hold(session: &[u8]) -> bool {
    with_index(|index| index.may_hold(session))
}

/// `FLUSHDB` (`Some(db)`) or `FLUSHALL` (`None`): the flushed keys hold nothing.
pub fn flushed(db: Option<i32>) {
    with_index(|index| index.forget_keys(|(key_db, _)| db.is_none_or(|db| db == *key_db)));
}

/// `SWAPDB first second`: the keys of each database are in the other now.
pub fn swapped(first: i32, second: i32) {
    with_index(|index| {
        index.rename_keys(|(db, name)| match *db {
            db if db == first => Some((second, name.clone())),
            db if db == second => Some((first, name.clone())),
            _ => None,
        })
    });
}

/// Sessions with keys in the index (for `INFO`).
pub fn count() -> usize {
    with_index(|index| index.sessions())
}
