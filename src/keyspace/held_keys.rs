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
//! `RESTORE … REPLACE`; it goes some time after its holding ended.
//!
//! Oldest first: in log order, a lock's start is its entry's fence (or later), so
//! `LOCK.TOP BY held` reads from the front of the log (and the few holdings whose start
//! is kept apart) and stops once no later entry could come before the last one listed.
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

use std::cell::{Cell, RefCell};
use std::cmp::Ordering as Order;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use foldhash::fast::FixedState;

use fencelock_core::shared::SharedHolders;
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisString};

use crate::durations;
use crate::ffi::lock_key::LockKey;
use crate::ffi::server::{select_db, selected_db};
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

/// The lease end of an entry whose holding ended.
const ENDED: i64 = i64::MIN;

/// One holding, as a load or an arrival brings it: its fence, when its lease ends
/// (Unix ms; `i64::MAX` none or not known here: a shared holder's, which its set
/// keeps), its key.
struct Entry {
    fence: u64,
    kept: Kept,
}

/// What an entry keeps besides its fence.
struct Kept {
    lease_end_ms: i64,
    name: Name,
}

impl Kept {
    fn is_live(&self) -> bool {
        self.lease_end_ms != ENDED
    }
}

/// Entries sorted by fence, then name, the fences apart (eight to a cache line), and
/// every `STRIDE`th fence once more (`skip`, small enough to stay in cache): a search
/// looks at the skip list, then at the fences of one stride, and at names only among
/// equal fences.
#[derive(Default)]
struct Run {
    fences: Vec<u64>,
    kept: Vec<Kept>,
    skip: Vec<u64>,
    /// Where the last search ended: the same lock refreshed again, or the next one in
    /// grant order, is found there without a search.
    hint: Cell<usize>,
}

/// Fences a step of the skip list covers (256 bytes of fences, four cache lines).
const STRIDE: usize = 32;

impl Run {
    fn len(&self) -> usize {
        self.fences.len()
    }

    /// Where `(fence, name)` is, or would go.
    fn find(&self, fence: u64, name: &[u8]) -> Result<usize, usize> {
        let is_at = |at: usize| {
            self.fences.get(at) == Some(&fence)
                && self
                    .kept
                    .get(at)
                    .is_some_and(|kept| kept.name.as_bytes() == name)
        };
        let hint = self.hint.get();
        if let Some(at) = [hint, hint + 1].into_iter().find(|at| is_at(*at)) {
            self.hint.set(at);
            return Ok(at);
        }
        let mut at = place_of(&self.fences, &self.skip, fence);
        while self.fences.get(at) == Some(&fence) {
            match self.kept.get(at).map(|kept| kept.name.as_bytes().cmp(name)) {
                Some(Order::Less) => at += 1,
                Some(Order::Equal) => {
                    self.hint.set(at);
                    return Ok(at);
                }
                _ => break,
            }
        }
        Err(at)
    }

    /// Whether `(fence, name)` goes after every entry.
    fn goes_last(&self, fence: u64, name: &[u8]) -> bool {
        match (self.fences.last(), self.kept.last()) {
            (Some(&last), Some(kept)) => (last, kept.name.as_bytes()) < (fence, name),
            _ => true,
        }
    }

    fn push(&mut self, entry: Entry) {
        if self.fences.len().is_multiple_of(STRIDE) {
            self.skip.push(entry.fence);
        }
        self.fences.push(entry.fence);
        self.kept.push(entry.kept);
    }

    /// An entry put in the middle (only among the arrivals, which are few).
    fn insert(&mut self, at: usize, entry: Entry) {
        self.fences.insert(at, entry.fence);
        self.kept.insert(at, entry.kept);
        self.skip_again();
    }

    fn skip_again(&mut self) {
        self.skip = self.fences.iter().step_by(STRIDE).copied().collect();
    }

    fn get_mut(&mut self, at: usize) -> Option<&mut Kept> {
        self.kept.get_mut(at)
    }

    /// Drops the ended entries, and the room of a run that shrank to a quarter of it.
    fn retain_live(&mut self) {
        let mut live = self.kept.iter().map(Kept::is_live);
        self.fences.retain(|_| live.next().unwrap_or(false));
        self.kept.retain(Kept::is_live);
        if self.fences.capacity() > 4 * self.fences.len() + 16 {
            self.fences.shrink_to(2 * self.fences.len());
            self.kept.shrink_to(2 * self.kept.len());
        }
        self.skip_again();
    }

    /// The first live entry after `(fence, name)` (from the first for `None`).
    fn next(&self, after: Option<(u64, &[u8])>) -> Option<(u64, &Kept)> {
        let from = after.map_or(0, |(fence, name)| match self.find(fence, name) {
            Ok(at) => at + 1,
            Err(at) => at,
        });
        let live = self.kept.get(from..)?.iter().position(Kept::is_live)?;
        let at = from + live;
        Some((*self.fences.get(at)?, self.kept.get(at)?))
    }

    /// The live entries with `fence`.
    fn with_fence(&self, fence: u64) -> impl Iterator<Item = &Kept> {
        let from = place_of(&self.fences, &self.skip, fence);
        let same = self
            .fences
            .get(from..)
            .unwrap_or(&[])
            .iter()
            .take_while(move |other| **other == fence)
            .count();
        self.kept
            .get(from..from + same)
            .unwrap_or(&[])
            .iter()
            .filter(|kept| kept.is_live())
    }

    fn into_entries(self) -> impl Iterator<Item = Entry> {
        self.fences
            .into_iter()
            .zip(self.kept)
            .map(|(fence, kept)| Entry { fence, kept })
    }
}

/// Where the first fence not below `fence` is in `fences` (sorted), `skip` being every
/// `STRIDE`th of them: the stride is found in `skip`, the place in that stride.
fn place_of(fences: &[u64], skip: &[u64], fence: u64) -> usize {
    let step = skip.partition_point(|other| *other < fence);
    if step == 0 {
        return 0;
    }
    // fences[lo] < fence, and fences[hi] (if any) is not.
    let lo = (step - 1) * STRIDE;
    let hi = (step * STRIDE).min(fences.len());
    lo + fences
        .get(lo..hi)
        .unwrap_or(&[])
        .partition_point(|other| *other < fence)
}

/// One database's entries: those noted in grant order (`granted`) and those noted out
/// of it (`arrived`, merged into `granted` once they are an eighth of them: a lock
/// moved in costs no move of the whole log), and how many of both ended.
#[derive(Default)]
struct Log {
    granted: Run,
    arrived: Run,
    ended: usize,
}

/// Where a holding's entry is: in `granted` or in `arrived`, at this index.
#[derive(Clone, Copy)]
enum At {
    Granted(usize),
    Arrived(usize),
}

impl Log {
    fn find(&self, fence: u64, name: &[u8]) -> Option<At> {
        self.granted
            .find(fence, name)
            .map(At::Granted)
            .or_else(|_| self.arrived.find(fence, name).map(At::Arrived))
            .ok()
    }

    fn get_mut(&mut self, at: At) -> Option<&mut Kept> {
        match at {
            At::Granted(at) => self.granted.get_mut(at),
            At::Arrived(at) => self.arrived.get_mut(at),
        }
    }

    /// Updates a noted entry's lease end (it lives again if it had ended).
    fn update(&mut self, at: At, lease_end_ms: i64) {
        let mut revived = false;
        if let Some(kept) = self.get_mut(at) {
            revived = !kept.is_live();
            kept.lease_end_ms = lease_end_ms;
        }
        if revived {
            self.ended = self.ended.saturating_sub(1);
        }
    }

    /// Notes a holding: at the end (a grant: the highest fence yet), else updated where
    /// it is, else among the arrivals. Returns whether ended entries were dropped (see
    /// `Held::compacted`).
    fn note(&mut self, fence: u64, name: &[u8], lease_end_ms: i64) -> bool {
        let entry = |name: &[u8]| Entry {
            fence,
            kept: Kept {
                lease_end_ms,
                name: Name::new(name),
            },
        };
        if self.granted.goes_last(fence, name) {
            let compacted = self.compact_if_sparse();
            self.granted.push(entry(name));
            return compacted;
        }
        if let Some(at) = self.find(fence, name) {
            self.update(at, lease_end_ms);
            return false;
        }
        let at = self.arrived.find(fence, name).unwrap_or_else(|at| at);
        self.arrived.insert(at, entry(name));
        if self.arrived.len() > 64 && self.arrived.len() * 8 > self.granted.len() {
            self.merge();
            return true;
        }
        false
    }

    /// Notes many holdings at once (a load): sorted, then merged.
    fn note_all(&mut self, mut batch: Vec<Entry>) {
        batch.sort_unstable_by(|a, b| {
            (a.fence, a.kept.name.as_bytes()).cmp(&(b.fence, b.kept.name.as_bytes()))
        });
        let mut fresh = Run::default();
        for entry in batch {
            let (fence, name) = (entry.fence, entry.kept.name.as_bytes());
            if let Some(at) = self.find(fence, name) {
                self.update(at, entry.kept.lease_end_ms);
            } else if fresh.goes_last(fence, name) {
                fresh.push(entry);
            }
        }
        if fresh.len() > 0 {
            let arrived = std::mem::take(&mut self.arrived);
            self.arrived = merged(arrived, fresh);
            self.merge();
        }
    }

    /// The arrivals join the granted entries; ended entries of both go.
    fn merge(&mut self) {
        let granted = std::mem::take(&mut self.granted);
        let arrived = std::mem::take(&mut self.arrived);
        self.granted = merged(granted, arrived);
        self.granted.retain_live();
        self.ended = 0;
    }

    /// The live entry of this holding, if noted.
    fn live_mut(&mut self, fence: u64, name: &[u8]) -> Option<&mut Kept> {
        let at = self.find(fence, name)?;
        self.get_mut(at).filter(|kept| kept.is_live())
    }

    /// Marks a holding's entry ended: its lease end, if it was noted.
    fn end(&mut self, fence: u64, name: &[u8]) -> Option<i64> {
        let kept = self.live_mut(fence, name)?;
        let lease_end_ms = std::mem::replace(&mut kept.lease_end_ms, ENDED);
        self.ended += 1;
        Some(lease_end_ms)
    }

    /// Drops the ended entries once they are a quarter of the log.
    fn compact_if_sparse(&mut self) -> bool {
        let len = self.granted.len() + self.arrived.len();
        if self.ended < 16 || self.ended * 4 < len {
            return false;
        }
        self.granted.retain_live();
        self.arrived.retain_live();
        self.ended = 0;
        true
    }

    /// The first live entry after `after`, in (fence, name) order.
    fn next(&self, after: Option<(u64, &[u8])>) -> Option<(u64, &Kept)> {
        match (self.granted.next(after), self.arrived.next(after)) {
            (Some(a), Some(b)) if (b.0, b.1.name.as_bytes()) < (a.0, a.1.name.as_bytes()) => {
                Some(b)
            }
            (Some(a), _) => Some(a),
            (None, b) => b,
        }
    }

    /// The names of the live entries with `fence`.
    fn names_with_fence(&self, fence: u64) -> impl Iterator<Item = &[u8]> {
        self.granted
            .with_fence(fence)
            .chain(self.arrived.with_fence(fence))
            .map(|kept| kept.name.as_bytes())
    }

    fn live(&self) -> usize {
        (self.granted.len() + self.arrived.len()).saturating_sub(self.ended)
    }
}

/// Two sorted runs of entries as one.
fn merged(a: Run, b: Run) -> Run {
    if b.len() == 0 {
        return a;
    }
    let mut out = Run {
        fences: Vec::with_capacity(a.len() + b.len()),
        kept: Vec::with_capacity(a.len() + b.len()),
        skip: Vec::new(),
        hint: Cell::new(0),
    };
    let mut b = b.into_entries().peekable();
    for entry in a.into_entries() {
        let key = (entry.fence, entry.kept.name.as_bytes());
        while let Some(next) = b.next_if(|next| (next.fence, next.kept.name.as_bytes()) < key) {
            out.push(next);
        }
        out.push(entry);
    }
    for entry in b {
        out.push(entry);
    }
    out
}

/// Every database's log, by its number, and the starts of holdings whose fence was
/// ahead of the clock (by fence).
struct Held {
    logs: Vec<Log>,
    ahead: Ahead,
    /// Starts in `ahead` of holdings that ended (flagged `ENDED_START`), kept until
    /// they are half of it: a holding renamed, moved or restored over itself ends
    /// under one name and comes back under another in the same command.
    ahead_ended: usize,
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

/// The flag of a start in `Held::ahead` whose holding ended.
const ENDED_START: u64 = 1 << 63;

/// Fences are not chosen by clients: a fixed seed is enough, and lets the table be
/// made without a first-use check.
type Ahead = HashMap<u64, u64, FixedState>;

const NO_AHEAD: Ahead = HashMap::with_hasher(FixedState::with_seed(0x5eed_f3c3));

impl Held {
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
        self.note_entry(db, name, fence, lease_end_ms);
        if is_ahead(fence, now_us) {
            self.keep_start(fence, now_us);
        }
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

    /// Keeps `now_us` as the start of the holding `fence`, unless one is kept already
    /// (which holds again if its holding had ended: the holding moved).
    fn keep_start(&mut self, fence: u64, now_us: u64) {
        match self.ahead.get_mut(&fence) {
            Some(since) if *since & ENDED_START != 0 => {
                *since &= !ENDED_START;
                self.ahead_ended = self.ahead_ended.saturating_sub(1);
            }
            Some(_) => {}
            None => {
                self.ahead.insert(fence, now_us);
            }
        }
    }

    /// The holding `fence` ended: its start, if kept, is flagged so, and the flagged
    /// ones go once they are half of them.
    fn start_ended(&mut self, fence: u64) {
        if let Some(since) = self.ahead.get_mut(&fence) {
            if *since & ENDED_START == 0 {
                *since |= ENDED_START;
                self.ahead_ended += 1;
            }
        }
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
        self.ahead.retain(|_, since| *since & ENDED_START == 0);
        self.ahead_ended = 0;
    }

    fn since_of(&self, fence: u64) -> u64 {
        if self.ahead.is_empty() {
            return fence;
        }
        self.ahead
            .get(&fence)
            .map_or(fence, |since| since & !ENDED_START)
    }
}

thread_local! {
    // Made without a first-use check: every grant and unlink comes here.
    static HELD: RefCell<Held> = const {
        RefCell::new(Held {
            logs: Vec::new(),
            ahead: NO_AHEAD,
            ahead_ended: 0,
        })
    };
}

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
                held.logs = Vec::new();
                held.ahead = NO_AHEAD;
                held.ahead_ended = 0;
            }
            return;
        }
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
            held.start_ended(fence);
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
            held.start_ended(fence);
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
            held.keep_start(fence, now_us);
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
    fn starts_ahead(&mut self, fences: &[u64], now_us: u64) {
        for &fence in fences {
            if is_ahead(fence, now_us) || self.ahead.contains_key(&fence) {
                self.keep_start(fence, now_us);
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
        held.starts_ahead(&found.fences, now_us);
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
    let mut fences = Vec::new();
    for (db, name) in loaded {
        if !select_db(ctx, *db) {
            continue;
        }
        let found = holdings_of(ctx, name);
        fences.extend(found.fences);
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
        held.starts_ahead(&fences, now_us);
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
        Some(db) => drop(held.take(db)),
        None => {
            held.logs.clear();
            held.ahead.clear();
            held.ahead_ended = 0;
        }
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

/// The live entries of `db` whose holding began before its fence (the fence was ahead
/// of the clock): few, and out of the log's order of starts.
pub fn noted_ahead(db: i32) -> Vec<Noted> {
    if !tracking() {
        return Vec::new();
    }
    with(|held| {
        if held.ahead.is_empty() {
            return Vec::new();
        }
        let Held { logs, ahead, .. } = held;
        let Some(log) = usize::try_from(db).ok().and_then(|db| logs.get(db)) else {
            return Vec::new();
        };
        ahead
            .iter()
            .filter(|(_, since)| **since & ENDED_START == 0)
            .flat_map(|(&fence, _)| {
                log.names_with_fence(fence)
                    .map(move |name| (fence, name.to_vec()))
            })
            .collect()
    })
}

/// `LOCK.TOP` found that the key of an entry no longer has its holding (a holding
/// replaced where nothing said so): the entry goes, nothing is counted.
pub fn gone(db: i32, name: &[u8], fence: u64) {
    with(|held| {
        if let Some(log) = held.log(db) {
            log.end(fence, name);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fence: u64, name: &[u8], lease_end_ms: i64) -> Entry {
        Entry {
            fence,
            kept: Kept {
                lease_end_ms,
                name: Name::new(name),
            },
        }
    }

    /// The live entries as `next` walks them.
    fn walked(log: &Log) -> Vec<(u64, Vec<u8>)> {
        let mut after: Option<(u64, Vec<u8>)> = None;
        let mut all = Vec::new();
        while let Some((fence, kept)) = log.next(after.as_ref().map(|(f, n)| (*f, n.as_slice()))) {
            let noted = (fence, kept.name.as_bytes().to_vec());
            all.push(noted.clone());
            after = Some(noted);
        }
        all
    }

    fn fences(walked: &[(u64, Vec<u8>)]) -> Vec<u64> {
        walked.iter().map(|(fence, _)| *fence).collect()
    }

    #[test]
    fn names_are_kept_inline_up_to_22_bytes() {
        let short = b"lock:order:12345".as_slice();
        let long = b"lock:a-name-longer-than-twenty-two-bytes".as_slice();
        assert!(matches!(Name::new(short), Name::Inline { .. }));
        assert!(matches!(Name::new(long), Name::Heap(_)));
        assert_eq!(Name::new(short).as_bytes(), short);
        assert_eq!(Name::new(long).as_bytes(), long);
        // 8 bytes of fence and 32 kept: 40 bytes an entry.
        assert_eq!(std::mem::size_of::<Name>(), 24);
        assert_eq!(std::mem::size_of::<Kept>(), 32);
    }

    #[test]
    fn a_place_is_found_as_a_binary_search_finds_it() {
        // Fences in bursts and gaps.
        let mut all: Vec<u64> = Vec::new();
        let mut fence = 1_000;
        for i in 0..2_000u64 {
            fence += match i % 7 {
                0 => 5_000,
                1 | 2 => 0,
                _ => 1,
            };
            all.push(fence);
        }
        let skip: Vec<u64> = all.iter().step_by(STRIDE).copied().collect();
        for probe in 0..(fence + 10) {
            assert_eq!(
                place_of(&all, &skip, probe),
                all.partition_point(|other| *other < probe),
                "{probe}"
            );
        }
        assert_eq!(place_of(&[], &[], 5), 0);
    }

    #[test]
    fn grants_append_and_arrivals_go_to_their_place() {
        let mut log = Log::default();
        log.note(10, b"a", 100);
        log.note(20, b"b", 200);
        log.note(15, b"moved", 150);
        log.note(15, b"copy", 150);
        // Noted again (a replica applying it once more): updated, not repeated.
        log.note(20, b"b", 250);
        assert_eq!(log.arrived.len(), 2, "not moved into the grants");
        assert_eq!(
            walked(&log),
            [
                (10, b"a".to_vec()),
                (15, b"copy".to_vec()),
                (15, b"moved".to_vec()),
                (20, b"b".to_vec())
            ]
        );
        assert_eq!(log.live_mut(20, b"b").map(|k| k.lease_end_ms), Some(250));
        assert_eq!(log.end(15, b"moved"), Some(150));
        assert_eq!(log.end(15, b"moved"), None, "ended once");
        assert_eq!(log.end(15, b"other"), None);
        assert_eq!(log.live(), 3);
        assert_eq!(fences(&walked(&log)), [10, 15, 20]);
        assert_eq!(log.names_with_fence(15).count(), 1);
        log.end(15, b"copy");
        assert_eq!(log.names_with_fence(15).count(), 0);
    }

    #[test]
    fn a_load_is_sorted_and_merged_once() {
        let mut log = Log::default();
        log.note(50, b"granted", 0);
        let batch = [
            (70, &b"z"[..]),
            (30, b"y"),
            (50, b"granted"),
            (30, b"x"),
            (30, b"x"),
        ]
        .into_iter()
        .map(|(fence, name)| entry(fence, name, 1))
        .collect();
        log.note_all(batch);
        assert_eq!(log.arrived.len(), 0);
        assert_eq!(
            walked(&log),
            [
                (30, b"x".to_vec()),
                (30, b"y".to_vec()),
                (50, b"granted".to_vec()),
                (70, b"z".to_vec())
            ]
        );
        assert_eq!(
            log.live_mut(50, b"granted").map(|k| k.lease_end_ms),
            Some(1)
        );
    }

    #[test]
    fn arrivals_join_the_grants_once_they_are_an_eighth_of_them() {
        let mut log = Log::default();
        for fence in 1_000..1_600 {
            log.note(fence, b"k", 0);
        }
        for fence in 0..75 {
            log.note(fence, b"moved", 0);
        }
        assert_eq!(log.arrived.len(), 75);
        log.note(900, b"moved", 0);
        assert_eq!(log.arrived.len(), 0);
        assert_eq!(log.granted.len(), 676);
        assert_eq!(walked(&log).len(), 676);
        assert!(log.granted.fences.windows(2).all(|w| w[0] < w[1]));
        let skip: Vec<u64> = log.granted.fences.iter().step_by(STRIDE).copied().collect();
        assert_eq!(log.granted.skip, skip);
    }

    #[test]
    fn ended_entries_go_once_they_are_a_quarter_of_the_log() {
        let mut log = Log::default();
        for fence in 1..=100 {
            log.note(fence, b"k", 0);
        }
        for fence in 1..=24 {
            log.end(fence, b"k");
        }
        assert!(!log.compact_if_sparse(), "under a quarter");
        log.end(25, b"k");
        log.note(101, b"k", 0);
        assert_eq!(log.granted.len(), 76, "75 live and the new one");
        assert_eq!(log.ended, 0);
        assert_eq!(log.granted.fences.first(), Some(&26));
        assert_eq!(fences(&walked(&log)).len(), 76);
    }

    #[test]
    fn a_start_kept_for_a_fence_ahead_follows_the_holding_until_it_ends() {
        let mut held = Held {
            logs: Vec::new(),
            ahead: NO_AHEAD,
            ahead_ended: 0,
        };
        held.note(0, b"a", 5_000, 1_000, 0);
        held.note(0, b"b", 900, 1_000, 0);
        assert_eq!(held.since_of(5_000), 1_000);
        assert_eq!(held.since_of(900), 900);
        // Renamed: ended under one name, noted under another, later.
        if let Some(log) = held.log(0) {
            log.end(5_000, b"a");
        }
        held.start_ended(5_000);
        held.starts_ahead(&[5_000], 3_000);
        held.note(0, b"c", 5_000, 3_000, 0);
        assert_eq!(held.since_of(5_000), 1_000, "the start stays");
        held.compacted();
        assert_eq!(held.since_of(5_000), 1_000, "its holding goes on");
        held.start_ended(5_000);
        held.compacted();
        assert_eq!(held.since_of(5_000), 5_000, "gone with its holding");
    }
}
