//! The lock keys held on this server, per database: what `LOCK.TOP` looks at besides
//! the keys clients wait for, so that it never walks the keyspace. A name is added
//! when a holding is written under it (grant, apply, run, load, a lock arriving by
//! `RESTORE`, `RENAME`, `MOVE` or `COPY`) and removed when Redis unlinks the key (any
//! deletion, expiry, eviction or overwrite), or with its database (`FLUSHDB`,
//! `FLUSHALL`); `SWAPDB` swaps two databases' names. A name may stay a moment after its
//! last holder left (a done record, a lock-delay): `LOCK.TOP` opens each key it lists
//! and shows only what holds or is waited for.
//!
//! With each name it keeps when the holding began on this server's wall clock and when
//! an exclusive lease ends. A fence is the granting server's clock in µs only while the
//! fence clock is not ahead of the wall clock (after a jump ahead, fences count up by
//! one a grant), so the start is `min(fence, now)`: a holding's age and the hold
//! histogram stay right after such a jump. The lease end is what Redis's expiry of the
//! key no longer says once the key is gone: a lease that ran out is measured to its end,
//! not to when Redis got round to deleting the key.
//!
//! Names of up to 22 bytes (most lock names) are kept inline in the table's slot, so
//! noting and forgetting a lock allocates nothing: each is one hash and one probe.
//! The index costs about 60 B a held key (measured with 100,000 names of 18 bytes;
//! `fencelock.track-held-keys`, on by default). Switched off, nothing is noted and the index is dropped at the next grant:
//! `LOCK.TOP` then sees only the keys clients wait for; switched on again, a key held
//! meanwhile is noted at its next grant.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};

use fencelock_core::capacity::trim;
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisString};

use crate::ffi::lock_key::LockKey;
use crate::ffi::server::selected_db;
use crate::ffi::server_clock;

/// Bytes of a name kept inline.
const INLINE: usize = 22;

/// A key name: inline up to `INLINE` bytes, else on the heap. 24 bytes either way.
#[derive(Clone)]
enum Name {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Name {
    fn new(name: &[u8]) -> Self {
        match u8::try_from(name.len()) {
            Ok(len) if name.len() <= INLINE => {
                let mut bytes = [0u8; INLINE];
                if let Some(room) = bytes.get_mut(..name.len()) {
                    room.copy_from_slice(name);
                }
                Name::Inline { len, bytes }
            }
            _ => Name::Heap(name.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            Name::Heap(bytes) => bytes,
        }
    }
}

// Hashed and compared as its bytes, so that the table is searched with a `&[u8]`.
impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Name {}

impl Borrow<[u8]> for Name {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// What is kept of a held key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Noted {
    /// When its holding began, µs on this server's wall clock (a shared lock's: its
    /// earliest holder still counted; `UNKNOWN_SINCE` for a key loaded from disk, whose
    /// fences say it).
    pub since_us: u64,
    /// When an exclusive holding's lease ends (Unix ms; `i64::MAX` unknown or none).
    pub lease_end_ms: i64,
}

/// `since_us` of a key whose holdings' fences are the only account of their start.
pub const UNKNOWN_SINCE: u64 = 0;

type Names = HashMap<Name, Noted, foldhash::fast::RandomState>;

/// The names of each database, by its number (an empty table allocates nothing).
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
    // Made without a first-use check: every grant and unlink comes here.
    static HELD: RefCell<Held> = const { RefCell::new(Held(Vec::new())) };
}

/// `fencelock.track-held-keys`: whether held keys are noted for `LOCK.TOP`.
pub static TRACKING: AtomicBool = AtomicBool::new(true);

fn tracking() -> bool {
    TRACKING.load(Ordering::Relaxed)
}

fn with<T>(f: impl FnOnce(&mut Held) -> T) -> T {
    HELD.with(|held| f(&mut held.borrow_mut()))
}

/// The start of a holding granted with `fence` and written at `now_us`.
pub fn start_of(fence: u64, now_us: u64) -> u64 {
    fence.min(now_us)
}

/// A holding was written under `name` in `db`: an exclusive one (which replaced
/// whatever the key held: its start and lease end are the key's now), or a shared
/// holder joining (`joined`: the key's start stays its earliest).
pub fn note(db: i32, name: &[u8], noted: Noted, joined: bool) {
    with(|held| {
        if !tracking() {
            // Switched off: what was noted before goes, once.
            if !held.0.is_empty() {
                held.0 = Vec::new();
            }
            return;
        }
        let Some(names) = held.db_or_new(db) else {
            return;
        };
        // One hash: a name already there (one more shared holder) is updated in place
        // (a name made for it is dropped: only one over `INLINE` bytes allocated).
        match names.entry(Name::new(name)) {
            Entry::Occupied(mut kept) if joined => {
                let kept = kept.get_mut();
                kept.since_us = kept.since_us.min(noted.since_us);
            }
            Entry::Occupied(mut kept) => *kept.get_mut() = noted,
            Entry::Vacant(room) => {
                room.insert(noted);
            }
        }
    });
}

/// The exclusive lease of `name` now ends at `lease_end_ms` (a refresh, a `PEXPIRE`).
pub fn extended(db: i32, name: &[u8], lease_end_ms: i64) {
    with(|held| {
        if let Some(kept) = held.db(db).and_then(|names| names.get_mut(name)) {
            kept.lease_end_ms = lease_end_ms;
        }
    });
}

/// A key arrived under `name` (`RESTORE`, `RENAME`, `MOVE`, `COPY`): noted if it is a
/// lock, with the oldest fence it holds as its start and an exclusive lock's lease end
/// (its key's expiry, without a lock-delay).
pub fn note_if_lock(ctx: &Context, name: &[u8]) {
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &key_name, false);
    let now_us = server_clock::now_micros();
    let noted = match key.lock() {
        Ok(Some(LockRef::Exclusive(holding))) => Noted {
            since_us: start_of(holding.fence(), now_us),
            lease_end_ms: holding.lease_end_ms().unwrap_or_else(|| {
                key.remaining_ms().map_or(i64::MAX, |remaining| {
                    server_clock::now_ms().saturating_add(remaining)
                })
            }),
        },
        Ok(Some(LockRef::Shared(set))) => Noted {
            since_us: set
                .all()
                .map(|holder| start_of(holder.holding().fence(), now_us))
                .min()
                .unwrap_or(now_us),
            lease_end_ms: i64::MAX,
        },
        Ok(Some(LockRef::Quarantined(holding))) => Noted {
            since_us: start_of(holding.fence(), now_us),
            lease_end_ms: holding.lease_end_ms().unwrap_or(i64::MAX),
        },
        _ => return,
    };
    drop(key);
    note(selected_db(ctx), name, noted, false);
}

/// The expiry of the lock key `name` was changed by hand (`PEXPIRE`, `PERSIST`): an
/// exclusive lease without a lock-delay ends with the key now.
pub fn note_expiry(ctx: &Context, name: &[u8]) {
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &key_name, false);
    let Ok(Some(LockRef::Exclusive(holding))) = key.lock() else {
        return;
    };
    if holding.lease_end_ms().is_some() {
        return;
    }
    let lease_end_ms = key.remaining_ms().map_or(i64::MAX, |remaining| {
        server_clock::now_ms().saturating_add(remaining)
    });
    drop(key);
    extended(selected_db(ctx), name, lease_end_ms);
}

/// Whether `name` is noted in `db` (what makes a `PEXPIRE` of it worth a look).
pub fn is_noted(db: i32, name: &[u8]) -> bool {
    with(|held| held.db(db).is_some_and(|names| names.contains_key(name)))
}

/// Every lock key a load brought (their fences say when their holdings began).
pub fn note_loaded(loaded: &[(i32, Vec<u8>)]) {
    let unknown = Noted {
        since_us: UNKNOWN_SINCE,
        lease_end_ms: i64::MAX,
    };
    for (db, name) in loaded {
        note(*db, name, unknown, false);
    }
}

/// Redis unlinked the lock key `name` of `db`: what was noted of it.
pub fn forget(db: i32, name: &[u8]) -> Option<Noted> {
    with(|held| {
        let names = held.db(db)?;
        let noted = names.remove(name);
        // A table that emptied gives its room back, without a table made and freed on
        // every cycle of one lock.
        if noted.is_some() {
            trim(names);
        }
        noted
    })
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

/// What is noted of `name` in `db`.
pub fn noted(db: i32, name: &[u8]) -> Option<Noted> {
    if !tracking() {
        return None;
    }
    with(|held| held.db(db).and_then(|names| names.get(name).copied()))
}

/// The first `want` names of `db` in the order of `LOCK.TOP BY held` if each were held
/// as long as its note allows at `now_us` (its age in µs, longest first, then the name),
/// each with that age: no holding of a name is older than its note (a shared lock's
/// oldest holder may have left), so a listing taken from these is exact once the
/// ages found are at least the last one's. Copies: opening a key may unlink it, which
/// forgets it. The flag says whether these are all the names there are.
pub fn oldest(db: i32, now_us: u64, want: usize) -> (Vec<(u64, Vec<u8>)>, bool) {
    if !tracking() || want == 0 {
        return (Vec::new(), true);
    }
    with(|held| {
        let Some(names) = held.db(db) else {
            return (Vec::new(), true);
        };
        // A max-heap of the best `want` so far: its top is the worst of them.
        let mut best: BinaryHeap<(Reverse<u64>, &[u8])> = BinaryHeap::with_capacity(want + 1);
        for (name, noted) in names.iter() {
            let age_us = now_us.saturating_sub(noted.since_us);
            let candidate = (Reverse(age_us), name.as_bytes());
            if best.len() < want {
                best.push(candidate);
            } else if best.peek().is_some_and(|worst| candidate < *worst) {
                best.pop();
                best.push(candidate);
            }
        }
        let all = best.len() == names.len();
        let listed = best
            .into_sorted_vec()
            .into_iter()
            .map(|(Reverse(age_us), name)| (age_us, name.to_vec()))
            .collect();
        (listed, all)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_found_by_its_bytes_inline_or_not() {
        let mut names = Names::default();
        let short = b"lock:order:12345".as_slice();
        let long = b"lock:a-name-longer-than-twenty-two-bytes".as_slice();
        let noted = Noted {
            since_us: 1,
            lease_end_ms: 2,
        };
        names.insert(Name::new(short), noted);
        names.insert(Name::new(long), noted);
        assert!(matches!(Name::new(short), Name::Inline { .. }));
        assert!(matches!(Name::new(long), Name::Heap(_)));
        assert_eq!(names.get(short), Some(&noted));
        assert_eq!(names.get(long), Some(&noted));
        assert_eq!(names.get(b"lock:order:1234".as_slice()), None);
        assert_eq!(std::mem::size_of::<Name>(), 24);
    }
}
