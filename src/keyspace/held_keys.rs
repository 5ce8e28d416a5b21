//! The locks held on this server, per database, in grant order: what `LOCK.TOP` looks
//! at besides the keys clients wait for, so that it never walks the keyspace, and what
//! the hold histogram needs of a holding that its key cannot say once it is gone.
//!
//! Each grant of an exclusive lock (or of a shared lock's first holder) appends one
//! entry (its fence, its lease end, its key's name) to its database's log. Fences only
//! grow, so a grant's entry goes at the end: no hashing, no table to grow, nothing
//! moved. A shared lock is noted once, at its oldest holder: when that one leaves, the
//! key is noted again at the oldest left (out of grant order, see below); other holders
//! joining or leaving change nothing here. A refresh of an exclusive lease (and a
//! `PEXPIRE` of its key) finds its entry by its fence and writes the new lease end; an
//! ending holding (release, expiry, deletion, a run done) marks its entry ended the
//! same way, and the ended entries are dropped when they make a quarter of the log (at
//! a grant: each entry is moved once, a cost spread over the grants). An entry noted
//! out of grant order (a lock moved in by `RESTORE`, `RENAME`, `MOVE` or `COPY`, a
//! load, a shared lock's next oldest holder) joins a small sorted side run, merged into
//! the log once it is an eighth of it. `FLUSHDB`/`FLUSHALL` drop a database's log,
//! `SWAPDB` swaps two.
//!
//! Why the lease end: Redis removes a key's expiry before a module hears that the key
//! is unlinked (Redis 7.0 deletes it first), so a lease that ran out is measured to the
//! end kept here, not to when Redis got round to deleting its key.
//!
//! A fence is the granting server's clock in µs only while the fence clock is not
//! ahead of the wall clock (after a jump ahead, fences count up by one a grant): a
//! holding granted (or loaded) with a fence ahead of the clock has its start, the
//! wall clock then, kept by its fence in a small side table, so that its age and its
//! length count from its grant; every other holding starts at its fence (one at most
//! 1 ms ahead, issued in a burst of grants, too: within a millisecond). Kept by
//! fence, not by name, the start follows the holding through `RENAME`, `MOVE` and
//! `RESTORE … REPLACE`, and is shared by a lock's copies (`COPY`, `RESTORE` of a
//! `DUMP`); it goes some time after the last holding carrying it ended.
//!
//! Oldest first: in log order, a lock's start is its entry's fence (or later), and the
//! starts kept apart are ordered too, by start then name as `LOCK.TOP` lists (after a
//! jump of the fence clock every grant's start is kept apart, and a load gives all its
//! locks one start), so `LOCK.TOP BY held` reads from the front of both and stops once
//! no later entry could come before the last one listed.
//!
//! Names of up to 22 bytes (most lock names) are kept inline: an entry is 40 bytes (the
//! fences apart from the rest, so that a search reads eight of them a cache line), no
//! allocation of its own. With the log's spare room (it doubles as it grows) and ended
//! entries not yet dropped, a held lock costs 40–80 B (53 B measured with 100,000
//! held locks of 21-byte names), nothing per shared holder
//! (`fencelock.track-held-keys`, on by default). Switched off, nothing is noted and the
//! logs are dropped at the next grant: `LOCK.TOP` then sees only the keys clients wait
//! for, and a holding not noted counts from its fence and, if its lease ran out, to its
//! key's deletion; switched on again, a lock held meanwhile is noted at its next grant.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};

use foldhash::fast::FixedState;

use super::held_log::{Entry, Kept, Log, Name};

use fencelock_core::shared::SharedHolders;
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisString};

use crate::durations;
use crate::ffi::lock_key::LockKey;
use crate::ffi::main_thread::MainThread;
use crate::ffi::server::{select_db, selected_db};
use crate::ffi::server_clock;

/// Every database's log, by its number, and the starts of holdings whose fence was
/// ahead of the clock (by fence, and each noted holding's in order of start).
struct Held {
    logs: Vec<Log>,
    ahead: Ahead,
    /// `(db, start, name, fence)` of every noted holding with a start in `ahead`: read
    /// by `LOCK.TOP` oldest first (then by name, as it lists), a few at a time, in its
    /// database. The name is kept twice only for these (after a jump of the fence
    /// clock: every holding granted or loaded since).
    ahead_by_start: BTreeSet<StartedAhead>,
    /// Starts in `ahead` that no noted holding carries any more, kept until they are
    /// half of it and a grant comes: a holding renamed, moved or restored over itself
    /// ends under one name and comes back under another in the same command.
    ahead_ended: usize,
}

/// A holding whose start is kept apart: `(db, start µs, name, fence)`.
pub type StartedAhead = (i32, u64, Vec<u8>, u64);

/// A start kept apart: when its holding began (µs on this server's wall clock), and how
/// many noted holdings (a name in a database) carry it: copies of a lock (`COPY`,
/// `RESTORE`) share their fence; 0 once every one ended.
#[derive(Clone, Copy)]
struct Start {
    since: u64,
    holders: u32,
}

/// How far a fence may run ahead of the clock and still be its holding's start (µs):
/// grants faster than one a µs (a pipeline, an `ACQUIREALL` of many keys) issue fences
/// a few µs ahead, which are as good as a start and kept nowhere; after a jump ahead
/// of the fence clock, fences are minutes or hours ahead.
const AHEAD_SLACK_US: u64 = 1_000;

/// Whether `fence`, issued at `now_us`, says nothing of its start.
fn is_ahead(fence: u64, now_us: u64) -> bool {
    fence > now_us.saturating_add(AHEAD_SLACK_US)
}

/// Fences are not chosen by clients: a fixed seed is enough, and lets the table be
/// made in a constant.
type Ahead = HashMap<u64, Start, FixedState>;

const NO_AHEAD: Ahead = HashMap::with_hasher(FixedState::with_seed(0x5eed_f3c3));

impl Held {
    const fn new() -> Self {
        Self {
            logs: Vec::new(),
            ahead: NO_AHEAD,
            ahead_by_start: BTreeSet::new(),
            ahead_ended: 0,
        }
    }

    fn log(&mut self, db: i32) -> Option<&mut Log> {
        self.logs.get_mut(usize::try_from(db).ok()?)
    }

    fn log_or_new(&mut self, db: i32) -> Option<&mut Log> {
        let at = usize::try_from(db).ok()?;
        if self.logs.len() <= at {
            self.logs.resize_with(at + 1, Log::default);
        }
        self.logs.get_mut(at)
    }

    fn take(&mut self, db: i32) -> Log {
        self.log(db).map(std::mem::take).unwrap_or_default()
    }

    /// Notes a holding of `name` in `db`; a fence ahead of `now_us` keeps `now_us` as
    /// its start (a start already kept stays: the holding moved, or was noted again).
    fn note(&mut self, db: i32, name: &[u8], fence: u64, now_us: u64, lease_end_ms: i64) {
        // The start first: the entry may compact the log, and the starts no holding
        // carries with it.
        if is_ahead(fence, now_us) {
            self.keep_start(db, name, fence, now_us);
        }
        self.note_entry(db, name, fence, lease_end_ms);
    }

    /// Notes the entry of a holding (its start kept, if it needs one, apart).
    fn note_entry(&mut self, db: i32, name: &[u8], fence: u64, lease_end_ms: i64) {
        let Some(log) = self.log_or_new(db) else {
            return;
        };
        if log.note(fence, name, lease_end_ms) {
            self.compacted();
        }
    }

    /// Keeps `now_us` as the start of the holding `fence` of `name` in `db`, unless one
    /// is kept for `fence` already (which holds again if its holding had ended: the
    /// holding moved, or is a copy).
    fn keep_start(&mut self, db: i32, name: &[u8], fence: u64, now_us: u64) {
        let ended_before = self
            .ahead
            .get(&fence)
            .is_some_and(|start| start.holders == 0);
        let start = self.ahead.entry(fence).or_insert(Start {
            since: now_us,
            holders: 0,
        });
        if self
            .ahead_by_start
            .insert((db, start.since, name.to_vec(), fence))
        {
            if ended_before {
                self.ahead_ended = self.ahead_ended.saturating_sub(1);
            }
            start.holders = start.holders.saturating_add(1);
        }
    }

    /// The holding `fence` of `name` in `db` ended: its start, if kept, is carried by
    /// one holding fewer (and goes once none carries it, at a later grant).
    fn start_ended(&mut self, db: i32, name: &[u8], fence: u64) {
        let Some(start) = self.ahead.get_mut(&fence) else {
            return;
        };
        if self
            .ahead_by_start
            .remove(&(db, start.since, name.to_vec(), fence))
        {
            start.holders = start.holders.saturating_sub(1);
            if start.holders == 0 {
                self.ahead_ended += 1;
            }
        }
    }

    /// `FLUSHDB`: the holdings of `db` carry their starts no more.
    fn forget_starts_in(&mut self, db: i32) {
        let mut rest = self.ahead_by_start.split_off(&(db, 0, Vec::new(), 0));
        let after = rest.split_off(&(db.saturating_add(1), 0, Vec::new(), 0));
        self.ahead_by_start.extend(after);
        for (_, _, _, fence) in rest {
            if let Some(start) = self.ahead.get_mut(&fence) {
                start.holders = start.holders.saturating_sub(1);
                if start.holders == 0 {
                    self.ahead_ended += 1;
                }
            }
        }
    }

    /// Before a grant: the starts no holding carries go once they are half of them.
    fn drop_ended_starts_if_many(&mut self) {
        if self.ahead_ended > 64 && self.ahead_ended * 2 > self.ahead.len() {
            self.compacted();
        }
    }

    /// Notes many holdings of `db` at once (see `note`).
    fn note_all(&mut self, db: i32, batch: Vec<Entry>) {
        if let Some(log) = self.log_or_new(db) {
            log.note_all(batch);
        }
        self.compacted();
    }

    /// After a log dropped its ended entries: the starts kept of holdings that ended
    /// go too.
    fn compacted(&mut self) {
        if self.ahead_ended == 0 {
            return;
        }
        self.ahead.retain(|_, start| start.holders > 0);
        self.ahead_ended = 0;
    }

    fn since_of(&self, fence: u64) -> u64 {
        if self.ahead.is_empty() {
            return fence;
        }
        self.ahead.get(&fence).map_or(fence, |start| start.since)
    }
}

// Every grant and unlink comes here.
static HELD: MainThread<RefCell<Held>> = MainThread::new(|| RefCell::new(Held::new()));

/// `fencelock.track-held-keys`: whether held keys are noted for `LOCK.TOP`.
pub static TRACKING: AtomicBool = AtomicBool::new(true);

fn tracking() -> bool {
    TRACKING.load(Ordering::Relaxed)
}

fn with<T>(f: impl FnOnce(&mut Held) -> T) -> T {
    HELD.with(|held| f(&mut held.borrow_mut()))
}

/// A holding was granted (or applied, or a run claimed) under `name` in `db` with
/// `fence` at `now_us`; an exclusive one's lease ends at `lease_end_ms` (`i64::MAX`
/// for a shared holder, whose set keeps its lease).
pub fn granted(db: i32, name: &[u8], fence: u64, now_us: u64, lease_end_ms: i64) {
    with(|held| {
        if !tracking() {
            // Switched off: what was noted before goes, once.
            if !held.logs.is_empty() || !held.ahead.is_empty() {
                *held = Held::new();
            }
            return;
        }
        held.drop_ended_starts_if_many();
        held.note(db, name, fence, now_us, lease_end_ms);
    });
}

/// The exclusive holding `fence` of `name` now ends its lease at `lease_end_ms` (a
/// refresh, a `PEXPIRE`).
pub fn extended(db: i32, name: &[u8], fence: u64, lease_end_ms: i64) {
    with(|held| {
        if let Some(kept) = held.log(db).and_then(|log| log.live_mut(fence, name)) {
            kept.lease_end_ms = lease_end_ms;
        }
    });
}

/// What is known of a holding that ended: when it began (µs on this server's wall
/// clock) and when its lease ended (Unix ms; `i64::MAX` not known here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub since_us: u64,
    pub lease_end_ms: i64,
}

/// The holding `fence` of `name` in `db` ended: its entry is marked so.
pub fn ended(db: i32, name: &[u8], fence: u64) -> Ended {
    with(|held| {
        let lease_end_ms = held
            .log(db)
            .and_then(|log| log.end(fence, name))
            .unwrap_or(i64::MAX);
        let since_us = held.since_of(fence);
        if !held.ahead.is_empty() {
            held.start_ended(db, name, fence);
        }
        Ended {
            since_us,
            lease_end_ms,
        }
    })
}

/// The holding `fence` of `name` in `db` ended at `end_us` while its key stays (a
/// shared holder left or ran out, a run became a done record): counted in the hold
/// histogram from its start. A shared lock is noted once, at its oldest holder: when
/// that one leaves, the key is noted again at `oldest_left`, the oldest still there.
pub fn holding_ended(db: i32, name: &[u8], fence: u64, end_us: u64, oldest_left: Option<u64>) {
    let since_us = with(|held| {
        let since_us = held.since_of(fence);
        if !held.ahead.is_empty() {
            held.start_ended(db, name, fence);
        }
        let was_noted = held.log(db).and_then(|log| log.end(fence, name)).is_some();
        if let (true, Some(oldest)) = (was_noted, oldest_left) {
            held.note_entry(db, name, oldest, i64::MAX);
        }
        since_us
    });
    durations::holding_ended_now(since_us, end_us);
}

/// A holder with `fence` joined the shared lock `name`, whose oldest holder has
/// `oldest`: the key stays noted at that one (noted now if it was not, as when the
/// index was switched on meanwhile); a fence ahead of `now_us` keeps its start.
pub fn joined(db: i32, name: &[u8], fence: u64, oldest: Option<u64>, now_us: u64) {
    with(|held| {
        if !tracking() {
            return;
        }
        if is_ahead(fence, now_us) {
            held.keep_start(db, name, fence, now_us);
        }
        if let Some(oldest) = oldest {
            held.note_entry(db, name, oldest, i64::MAX);
        }
    });
}

/// The fence of a shared lock's oldest holder (the one the index notes it at).
pub fn oldest_fence(set: &SharedHolders) -> Option<u64> {
    set.all().next().map(|holder| holder.holding().fence())
}

/// When the holding granted with `fence` began, µs on this server's wall clock: its
/// fence, unless the fence was ahead of the clock at its grant or load.
pub fn since_of(fence: u64) -> u64 {
    with(|held| held.since_of(fence))
}

/// What the index notes of a lock that arrived or was loaded: its entry (an exclusive
/// holding, or a shared lock's oldest holder) as (fence, lease end), and the fence of
/// every holding (whose start is kept if it is ahead of the clock).
#[derive(Default)]
struct Found {
    entry: Option<(u64, i64)>,
    fences: Vec<u64>,
}

/// What the lock `name` holds now: an exclusive lease ends with its key, unless a
/// lock-delay keeps the key longer; a shared holder's lease is its set's.
fn holdings_of(ctx: &Context, name: &[u8]) -> Found {
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &key_name, false);
    match key.lock() {
        Ok(Some(LockRef::Exclusive(holding) | LockRef::Quarantined(holding))) => {
            let lease_end_ms = holding.lease_end_ms().unwrap_or_else(|| {
                key.remaining_ms().map_or(i64::MAX, |remaining| {
                    server_clock::now_ms().saturating_add(remaining)
                })
            });
            Found {
                entry: Some((holding.fence(), lease_end_ms)),
                fences: vec![holding.fence()],
            }
        }
        Ok(Some(LockRef::Shared(set))) => Found {
            entry: oldest_fence(set).map(|fence| (fence, i64::MAX)),
            fences: set.all().map(|holder| holder.holding().fence()).collect(),
        },
        _ => Found::default(),
    }
}

impl Held {
    /// Keeps `now_us` as the start of each of `fences` ahead of it (one kept already
    /// stays: the holding moved, or was noted before).
    fn starts_ahead(&mut self, db: i32, name: &[u8], fences: &[u64], now_us: u64) {
        for &fence in fences {
            if is_ahead(fence, now_us) || self.ahead.contains_key(&fence) {
                self.keep_start(db, name, fence, now_us);
            }
        }
    }
}

/// A key arrived under `name` (`RESTORE`, `RENAME`, `MOVE`, `COPY`): noted if it is a
/// lock. A holding noted before keeps its start (kept by fence): a lock renamed or
/// moved, or restored over itself, keeps its age.
pub fn arrived(ctx: &Context, name: &[u8]) {
    if !tracking() {
        return;
    }
    let db = selected_db(ctx);
    let now_us = server_clock::now_micros();
    let found = holdings_of(ctx, name);
    with(|held| {
        held.starts_ahead(db, name, &found.fences, now_us);
        if let Some((fence, lease_end_ms)) = found.entry {
            held.note(db, name, fence, now_us, lease_end_ms);
        }
    });
}

/// Every lock key a load brought (`(db, name)`), noted at the load's end: a holding
/// whose fence is ahead of the clock starts then (its real start is not known here).
pub fn loaded(ctx: &Context, loaded: &[(i32, Vec<u8>)]) {
    if !tracking() || loaded.is_empty() {
        return;
    }
    let now_us = server_clock::now_micros();
    let mut by_db: Vec<(i32, Vec<Entry>)> = Vec::new();
    let mut fences: Vec<(i32, &[u8], Vec<u64>)> = Vec::new();
    for (db, name) in loaded {
        if !select_db(ctx, *db) {
            continue;
        }
        let found = holdings_of(ctx, name);
        fences.push((*db, name, found.fences));
        let Some((fence, lease_end_ms)) = found.entry else {
            continue;
        };
        let entry = Entry {
            fence,
            kept: Kept {
                lease_end_ms,
                name: Name::new(name),
            },
        };
        match by_db.iter_mut().find(|(noted_db, _)| noted_db == db) {
            Some((_, batch)) => batch.push(entry),
            None => by_db.push((*db, vec![entry])),
        }
    }
    with(|held| {
        for (db, name, fences) in fences {
            held.starts_ahead(db, name, &fences, now_us);
        }
        for (db, batch) in by_db {
            held.note_all(db, batch);
        }
    });
}

/// The expiry of the lock key `name` was changed by hand (`PEXPIRE`, `PERSIST`): an
/// exclusive lease without a lock-delay ends with the key now.
pub fn expiry_changed(ctx: &Context, name: &[u8]) {
    let db = selected_db(ctx);
    // Most such events are of other keys: looked at only while locks are held here.
    if !with(|held| held.log(db).is_some_and(|log| log.live() > 0)) {
        return;
    }
    let key_name = RedisString::create_from_slice(ctx.ctx, name);
    let key = LockKey::open(ctx, &key_name, false);
    let Ok(Some(LockRef::Exclusive(holding))) = key.lock() else {
        return;
    };
    if holding.lease_end_ms().is_some() {
        return;
    }
    let fence = holding.fence();
    let lease_end_ms = key.remaining_ms().map_or(i64::MAX, |remaining| {
        server_clock::now_ms().saturating_add(remaining)
    });
    drop(key);
    extended(db, name, fence, lease_end_ms);
}

/// `FLUSHDB` (`Some(db)`) or `FLUSHALL` (`None`).
pub fn flushed(db: Option<i32>) {
    with(|held| match db {
        Some(db) => {
            drop(held.take(db));
            held.forget_starts_in(db);
        }
        None => *held = Held::new(),
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
        if let Some(log) = held.log_or_new(second) {
            *log = a;
        }
        if let Some(log) = held.log_or_new(first) {
            *log = b;
        }
        // The starts kept apart go with their databases' logs.
        let (moved, stay): (BTreeSet<_>, BTreeSet<_>) = std::mem::take(&mut held.ahead_by_start)
            .into_iter()
            .partition(|(db, ..)| *db == first || *db == second);
        held.ahead_by_start = stay;
        held.ahead_by_start
            .extend(moved.into_iter().map(|(db, since, name, fence)| {
                (if db == first { second } else { first }, since, name, fence)
            }));
    });
}

/// A noted holding: its fence and its key's name.
pub type Noted = (u64, Vec<u8>);

/// The first live entry of `db` after `after` (a fence and name) in grant order, the
/// oldest first. Copied out: opening its key may unlink it, which writes the log.
pub fn next_noted(db: i32, after: Option<(u64, &[u8])>) -> Option<Noted> {
    if !tracking() {
        return None;
    }
    with(|held| {
        let (fence, kept) = held.log(db)?.next(after)?;
        Some((fence, kept.name.as_bytes().to_vec()))
    })
}

/// The first holding of `db` whose start is kept apart (its fence was ahead of the
/// clock) after `after`, the oldest first, then by name: out of the log's order of
/// starts. A start of a holding not noted (a shared lock's younger holder: the lock is
/// noted at its oldest) is stepped over. Copied out, as `next_noted`.
pub fn next_started_ahead(db: i32, after: Option<&StartedAhead>) -> Option<StartedAhead> {
    if !tracking() {
        return None;
    }
    with(|held| {
        let Held {
            logs,
            ahead_by_start,
            ..
        } = held;
        let log = usize::try_from(db).ok().and_then(|db| logs.get(db))?;
        let from = match after {
            Some(after) => Bound::Excluded(after.clone()),
            None => Bound::Included((db, 0, Vec::new(), 0)),
        };
        ahead_by_start
            .range((from, Bound::Unbounded))
            .take_while(|(noted_db, ..)| *noted_db == db)
            .find(|(_, _, name, fence)| log.has_live(*fence, name))
            .cloned()
    })
}

/// `LOCK.TOP` found that the key of an entry no longer has its holding (a holding
/// replaced where nothing said so): the entry goes, nothing is counted.
pub fn gone(db: i32, name: &[u8], fence: u64) {
    with(|held| {
        if let Some(log) = held.log(db) {
            log.end(fence, name);
        }
        held.start_ended(db, name, fence);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_start(held: &Held) -> Vec<(i32, u64, &str, u64)> {
        held.ahead_by_start
            .iter()
            .map(|(db, since, name, fence)| {
                (
                    *db,
                    *since,
                    std::str::from_utf8(name).unwrap_or("?"),
                    *fence,
                )
            })
            .collect()
    }

    #[test]
    fn a_start_kept_for_a_fence_ahead_follows_the_holding_until_it_ends() {
        let mut held = Held::new();
        held.note(0, b"a", 5_000, 1_000, 0);
        held.note(0, b"b", 900, 1_000, 0);
        assert_eq!(held.since_of(5_000), 1_000);
        assert_eq!(held.since_of(900), 900);
        assert_eq!(
            by_start(&held),
            [(0, 1_000, "a", 5_000)],
            "only the fence ahead"
        );
        // Renamed: ended under one name, noted under another, later.
        if let Some(log) = held.log(0) {
            log.end(5_000, b"a");
        }
        held.start_ended(0, b"a", 5_000);
        assert_eq!(by_start(&held), []);
        held.starts_ahead(0, b"c", &[5_000], 3_000);
        held.note(0, b"c", 5_000, 3_000, 0);
        assert_eq!(held.since_of(5_000), 1_000, "the start stays");
        assert_eq!(
            by_start(&held),
            [(0, 1_000, "c", 5_000)],
            "read at its start"
        );
        held.compacted();
        assert_eq!(held.since_of(5_000), 1_000, "its holding goes on");
        held.start_ended(0, b"c", 5_000);
        held.compacted();
        assert_eq!(held.since_of(5_000), 5_000, "gone with its holding");
        assert_eq!(by_start(&held), []);
    }

    #[test]
    fn starts_kept_apart_are_read_oldest_first_then_by_name_in_their_database() {
        let mut held = Held::new();
        // Fences after a jump ahead, noted out of the order of their starts (a load
        // brings old fences late, all with one start): the order read is by start,
        // then name, per database.
        held.note(0, b"late", 9_000, 2_000, 0);
        held.note(1, b"other", 8_000, 500, 0);
        held.note(0, b"early", 9_500, 1_000, 0);
        held.note(0, b"b-loaded", 9_700, 1_000, 0);
        held.note(0, b"a-loaded", 9_800, 1_000, 0);
        assert_eq!(
            by_start(&held),
            [
                (0, 1_000, "a-loaded", 9_800),
                (0, 1_000, "b-loaded", 9_700),
                (0, 1_000, "early", 9_500),
                (0, 2_000, "late", 9_000),
                (1, 500, "other", 8_000)
            ]
        );
    }

    /// Copies of a lock (`COPY`, `RESTORE` of its `DUMP`) share its fence: one ending,
    /// in its database or another, leaves the others their start, however the starts
    /// are compacted meanwhile.
    #[test]
    fn a_copy_ending_leaves_the_original_its_start() {
        let mut held = Held::new();
        held.note(0, b"original", 5_000, 1_000, 0);
        held.starts_ahead(0, b"copy", &[5_000], 2_000);
        held.starts_ahead(1, b"copy", &[5_000], 2_000);
        assert_eq!(by_start(&held).len(), 3);
        held.start_ended(0, b"copy", 5_000);
        held.start_ended(1, b"copy", 5_000);
        held.compacted();
        assert_eq!(held.since_of(5_000), 1_000, "the original still carries it");
        assert_eq!(by_start(&held), [(0, 1_000, "original", 5_000)]);
        held.forget_starts_in(0);
        assert_eq!(by_start(&held), []);
        held.compacted();
        assert_eq!(held.since_of(5_000), 5_000, "flushed with its database");
    }
}
