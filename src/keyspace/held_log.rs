//! The log of the index of held keys (`held_keys`): the holdings of one database in
//! grant order, found by fence. Pure: no Redis types. See `held_keys` for what is
//! noted and when; this file is how it is kept.

use std::cell::Cell;
use std::cmp::Ordering as Order;

/// Bytes of a name kept inline.
const INLINE: usize = 22;

/// A key name: inline up to `INLINE` bytes, else on the heap. 24 bytes either way.
#[derive(Clone)]
pub(super) enum Name {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Name {
    pub(super) fn new(name: &[u8]) -> Self {
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

    pub(super) fn as_bytes(&self) -> &[u8] {
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
pub(super) struct Entry {
    pub(super) fence: u64,
    pub(super) kept: Kept,
}

/// What an entry keeps besides its fence.
pub(super) struct Kept {
    pub(super) lease_end_ms: i64,
    pub(super) name: Name,
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
pub(super) struct Log {
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
    pub(super) fn note(&mut self, fence: u64, name: &[u8], lease_end_ms: i64) -> bool {
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
    pub(super) fn note_all(&mut self, mut batch: Vec<Entry>) {
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
    pub(super) fn live_mut(&mut self, fence: u64, name: &[u8]) -> Option<&mut Kept> {
        let at = self.find(fence, name)?;
        self.get_mut(at).filter(|kept| kept.is_live())
    }

    /// Marks a holding's entry ended: its lease end, if it was noted.
    pub(super) fn end(&mut self, fence: u64, name: &[u8]) -> Option<i64> {
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
    pub(super) fn next(&self, after: Option<(u64, &[u8])>) -> Option<(u64, &Kept)> {
        match (self.granted.next(after), self.arrived.next(after)) {
            (Some(a), Some(b)) if (b.0, b.1.name.as_bytes()) < (a.0, a.1.name.as_bytes()) => {
                Some(b)
            }
            (Some(a), _) => Some(a),
            (None, b) => b,
        }
    }

    /// Whether the holding `fence` of `name` is noted and has not ended.
    pub(super) fn has_live(&self, fence: u64, name: &[u8]) -> bool {
        match self.find(fence, name) {
            Some(At::Granted(at)) => self.granted.kept.get(at).is_some_and(Kept::is_live),
            Some(At::Arrived(at)) => self.arrived.kept.get(at).is_some_and(Kept::is_live),
            None => false,
        }
    }

    pub(super) fn live(&self) -> usize {
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
        assert!(log.has_live(15, b"copy") && !log.has_live(15, b"moved"));
        log.end(15, b"copy");
        assert!(!log.has_live(15, b"copy"));
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
}
