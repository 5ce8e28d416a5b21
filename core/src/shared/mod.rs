//! The holders of a lock held shared (a read-write lock's readers, or a semaphore's
//! permits): each with its own token, fence and lease. Pure: the deadlines are Unix
//! milliseconds passed in and compared with a `now` passed in.
//!
//! Holders are kept by fence, which is grant order (a renewal keeps its fence and
//! place), the same on a primary and its replicas whatever order their removals came
//! in, so saving, digesting and rewriting walk them alike. Two holders of one set never
//! share a fence: every grant has its own, and a write that would repeat one is refused.
//! A small set is a list searched by a scan (`HolderList`); past `list::MOST`
//! holders it is indexed by token and lease end (`HolderIndex`), so that every command
//! on one holder stays O(log n), and it goes back to a list once it shrank to half that.

mod holder;
mod index;
mod list;

pub use holder::SharedHolder;

use crate::holding::{Holding, Offered};
use crate::mode::Mode;
use index::HolderIndex;
use list::HolderList;

/// Why a holder could not be added: another holder of the set has this fence.
#[derive(Debug, PartialEq, Eq)]
pub struct FenceTaken;

impl From<FenceTaken> for crate::error::CommandError {
    fn from(_: FenceTaken) -> Self {
        crate::error::CommandError::FenceTaken
    }
}

/// Where the holders are kept.
#[derive(Debug)]
enum Store {
    List(HolderList),
    /// Boxed: a list-sized set stays small.
    Index(Box<HolderIndex>),
}

/// `$store.$method(args)` on whichever store the set has.
macro_rules! on_store {
    ($store:expr, $method:ident($($arg:expr),*)) => {
        match $store {
            Store::List(list) => list.$method($($arg),*),
            Store::Index(index) => index.$method($($arg),*),
        }
    };
}

/// Every holder of a set, in grant order.
pub enum AllHolders<'a> {
    List(std::slice::Iter<'a, SharedHolder>),
    Index(std::collections::btree_map::Values<'a, u64, SharedHolder>),
}

impl<'a> Iterator for AllHolders<'a> {
    type Item = &'a SharedHolder;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            AllHolders::List(list) => list.next(),
            AllHolders::Index(index) => index.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            AllHolders::List(list) => list.size_hint(),
            AllHolders::Index(index) => index.size_hint(),
        }
    }
}

impl DoubleEndedIterator for AllHolders<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            AllHolders::List(list) => list.next_back(),
            AllHolders::Index(index) => index.next_back(),
        }
    }
}

impl ExactSizeIterator for AllHolders<'_> {}

/// Every shared holder of one lock. `repr(C)` with the tag first: a lock value's first
/// eight bytes tell a set of shared holders (zero) from an exclusive holding (its fence,
/// never zero); see `value`.
#[repr(C)]
#[derive(Debug)]
pub struct SharedHolders {
    tag: u64,
    /// 0: plain `SHARED`; n: a semaphore of n.
    limit: u32,
    /// How many holders belong to a session, and how many have a lock-delay: while
    /// none do, `LOCK.INFO` counts them without walking the set.
    in_sessions: u32,
    delayed: u32,
    /// When the module's lease-end timer for this set fires (0: none armed). Kept at or
    /// before the earliest holder's end (+1 ms): a deadline set earlier forgets it. So
    /// until then no holder has ended, which spares the write paths a look. Not saved.
    watched_at: i64,
    store: Store,
}

/// The value of `SharedHolders::tag`.
pub(crate) const SHARED_TAG: u64 = 0;

impl SharedHolders {
    /// An empty set in `mode` (shared or a semaphore; exclusive is stored as shared).
    pub fn new(mode: Mode) -> Box<SharedHolders> {
        Box::new(SharedHolders {
            tag: SHARED_TAG,
            limit: mode.stored_limit(),
            in_sessions: 0,
            delayed: 0,
            watched_at: 0,
            store: Store::List(HolderList::default()),
        })
    }

    pub fn mode(&self) -> Mode {
        Mode::from_stored_limit(self.limit)
    }

    /// Every holder, live or with an ended lease not yet removed, in grant order.
    pub fn all(&self) -> AllHolders<'_> {
        match &self.store {
            Store::List(list) => AllHolders::List(list.iter()),
            Store::Index(index) => AllHolders::Index(index.iter()),
        }
    }

    pub fn len(&self) -> usize {
        on_store!(&self.store, len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many holders take their room: live ones, and those quarantined after their
    /// lease ran out (all but the few whose room was freed and who were not dropped yet).
    pub fn live_count(&self, now_ms: i64) -> usize {
        let ended = on_store!(&self.store, count_ended(now_ms));
        self.len() - ended
    }

    /// How many holders hold (their lease has not ended); walks the set only when some
    /// holder has a lock-delay (and may take its room without holding).
    pub fn holding_count(&self, now_ms: i64) -> usize {
        if self.delayed == 0 {
            return self.live_count(now_ms);
        }
        self.all().filter(|h| h.is_live(now_ms)).count()
    }

    /// Whether some holder belongs to a session.
    pub fn has_sessions(&self) -> bool {
        self.in_sessions > 0
    }

    /// Whether some holder has a lock-delay.
    pub fn has_lock_delays(&self) -> bool {
        self.delayed > 0
    }

    /// The latest lease end among the holders (the key outlasts it by a lock-delay);
    /// walks the set only when some holder has one.
    pub fn latest_lease(&self) -> Option<i64> {
        if self.delayed == 0 {
            return self.latest_deadline();
        }
        self.all().map(SharedHolder::deadline_ms).max()
    }

    /// How many live holders belong to a session; walks the set only when some do.
    pub fn in_session_count(&self, now_ms: i64) -> usize {
        if self.in_sessions == 0 {
            return 0;
        }
        self.all()
            .filter(|h| h.is_live(now_ms) && h.holding().has_session())
            .count()
    }

    /// Keeps the counts of session and lock-delay holders as `holding` joins (`+1`) or
    /// leaves (`-1`).
    fn count(&mut self, holding: &Holding, joins: bool) {
        let step = |count: &mut u32| {
            *count = if joins {
                count.saturating_add(1)
            } else {
                count.saturating_sub(1)
            }
        };
        if holding.has_session() {
            step(&mut self.in_sessions);
        }
        if holding.lock_delay_ms() > 0 {
            step(&mut self.delayed);
        }
    }

    /// The live holder with `token`.
    pub fn live_holder(&self, token: &[u8], now_ms: i64) -> Option<&SharedHolder> {
        self.holder(token).filter(|h| h.is_live(now_ms))
    }

    /// The holder with `token`, whether its lease ended or not.
    pub fn holder(&self, token: &[u8]) -> Option<&SharedHolder> {
        self.fence_of(token)
            .and_then(|fence| on_store!(&self.store, get(fence)))
    }

    /// The fence of the holder with `token` (the token decoded once).
    fn fence_of(&self, token: &[u8]) -> Option<u64> {
        let offered = Offered::new(token);
        on_store!(&self.store, fence_of(&offered))
    }

    /// The highest fence among live holders: the newest, unless its lease ended.
    pub fn highest_fence(&self, now_ms: i64) -> Option<u64> {
        self.all()
            .rev()
            .find(|h| h.is_live(now_ms))
            .map(|h| h.holding.fence())
    }

    /// Adds a holder, or moves the deadline of the one with the same token (a renewal,
    /// or a replayed effect); its fence stays the one it was granted. Refused when
    /// another holder has the fence.
    pub fn put(&mut self, holding: Box<Holding>, deadline_ms: i64) -> Result<(), FenceTaken> {
        match on_store!(&self.store, fence_of_holding(&holding)) {
            Some(fence) => {
                self.move_deadline(fence, deadline_ms);
                Ok(())
            }
            None => self.insert(holding, deadline_ms),
        }
    }

    /// Adds a holder whose token holds nothing here (a freshly generated one, or one
    /// just looked for). Refused when another holder has the fence.
    pub fn insert(&mut self, holding: Box<Holding>, deadline_ms: i64) -> Result<(), FenceTaken> {
        if on_store!(&self.store, contains_fence(holding.fence())) {
            return Err(FenceTaken);
        }
        self.count(&holding, true);
        let holder = SharedHolder::new(holding, deadline_ms);
        let occupied_until_ms = holder.occupied_until_ms;
        on_store!(&mut self.store, insert(holder));
        self.deadline_set(occupied_until_ms);
        if matches!(self.store, Store::List(_)) && self.len() > list::MOST {
            self.restore(|holders| {
                let mut index = Box::<HolderIndex>::default();
                holders.into_iter().for_each(|holder| index.insert(holder));
                Store::Index(index)
            });
        }
        Ok(())
    }

    /// Moves every holder into another kind of store.
    fn restore(&mut self, rebuild: impl FnOnce(Vec<SharedHolder>) -> Store) {
        let store = std::mem::replace(&mut self.store, Store::List(HolderList::default()));
        let holders = on_store!(store, into_holders());
        self.store = rebuild(holders);
    }

    /// Whether the token of `holding` holds here already (a load checks each holder).
    pub fn holds_token_of(&self, holding: &Holding) -> bool {
        on_store!(&self.store, fence_of_holding(holding)).is_some()
    }

    /// When the lease-end timer fires, if one is armed (see `watched_at`).
    pub fn watched_at(&self) -> Option<i64> {
        (self.watched_at != 0).then_some(self.watched_at)
    }

    /// A lease-end timer fires at `at` (at most the earliest end + 1), or none (`None`).
    pub fn set_watched_at(&mut self, at: Option<i64>) {
        self.watched_at = at.unwrap_or(0);
    }

    /// A holder now takes its room until `occupied_until_ms`: a timer armed for later no
    /// longer fires before every end.
    fn deadline_set(&mut self, occupied_until_ms: i64) {
        if self.watched_at > occupied_until_ms.saturating_add(1) {
            self.watched_at = 0;
        }
    }

    /// Moves the lease of the holder with `fence` (which exists).
    fn move_deadline(&mut self, fence: u64, deadline_ms: i64) {
        let Some(holder) = on_store!(&self.store, get(fence)) else {
            return;
        };
        let occupied_until_ms = SharedHolder::occupied_until(holder.holding(), deadline_ms);
        on_store!(&mut self.store, move_deadline(fence, occupied_until_ms));
        self.deadline_set(occupied_until_ms);
    }

    /// Moves the deadline of the holder with `token`; false if there is none.
    pub fn set_deadline(&mut self, token: &[u8], deadline_ms: i64) -> bool {
        match self.fence_of(token) {
            Some(fence) => {
                self.move_deadline(fence, deadline_ms);
                true
            }
            None => false,
        }
    }

    /// Removes the holder with `token`, live or not.
    pub fn remove(&mut self, token: &[u8]) -> Option<SharedHolder> {
        let fence = self.fence_of(token)?;
        let removed = on_store!(&mut self.store, remove(fence));
        if let Some(holder) = &removed {
            self.count(holder.holding(), false);
        }
        self.shrink();
        removed
    }

    /// Removes every holder whose room is free by `now_ms` (lease ended, and lock-delay
    /// over), in grant order.
    pub fn take_ended(&mut self, now_ms: i64) -> Vec<SharedHolder> {
        let none_ended_yet = self.watched_at().is_some_and(|at| now_ms < at);
        if none_ended_yet {
            return Vec::new();
        }
        let mut fences = on_store!(&self.store, ended_fences(now_ms));
        if fences.is_empty() {
            return Vec::new();
        }
        fences.sort_unstable();
        let ended: Vec<SharedHolder> = fences
            .into_iter()
            .filter_map(|fence| on_store!(&mut self.store, remove(fence)))
            .collect();
        for holder in &ended {
            self.count(holder.holding(), false);
        }
        self.shrink();
        ended
    }

    /// An indexed set that shrank to half a list's most goes back to a list.
    fn shrink(&mut self) {
        if matches!(self.store, Store::Index(_)) && self.len() <= list::MOST / 2 {
            self.restore(|holders| Store::List(HolderList::from_holders(holders)));
        }
    }

    /// The latest end of a holder's room (lease and lock-delay): the key's own expiry.
    pub fn latest_deadline(&self) -> Option<i64> {
        on_store!(&self.store, latest_deadline())
    }

    /// The earliest lease end still to come after `now_ms` (a holder that then stops
    /// holding, though with a lock-delay it keeps its room longer). Walks the set only
    /// when some holder has a lock-delay.
    pub fn next_lease_end(&self, now_ms: i64) -> Option<i64> {
        if self.delayed == 0 {
            return self.earliest_deadline();
        }
        self.all()
            .map(SharedHolder::deadline_ms)
            .filter(|&end| end >= now_ms)
            .min()
    }

    /// The earliest end of a holder's room: when a holder next leaves by itself.
    pub fn earliest_deadline(&self) -> Option<i64> {
        on_store!(&self.store, earliest_deadline())
    }

    /// Bytes allocated for the set and every holding (for `MEMORY USAGE`).
    pub fn allocated_bytes(&self) -> usize {
        std::mem::size_of::<SharedHolders>()
            + on_store!(&self.store, allocated_bytes())
            + self
                .all()
                .map(|h| h.holding.allocated_bytes())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_lease_end_is_a_lease_not_a_room() {
        let mut set = SharedHolders::new(Mode::Shared);
        let extras = crate::holding::Extras {
            lock_delay_ms: 3_000,
            ..Default::default()
        };
        set.insert(Holding::pack_with(b"d", 1, extras).unwrap(), 300)
            .unwrap();
        set.insert(holding("p", 2), 10_000).unwrap();
        assert_eq!(set.earliest_deadline(), Some(3_300), "the room");
        assert_eq!(set.next_lease_end(0), Some(300), "the lease");
        assert_eq!(
            set.next_lease_end(301),
            Some(10_000),
            "an ended lease is past"
        );
        let mut plain = SharedHolders::new(Mode::Shared);
        plain.insert(holding("a", 3), 700).unwrap();
        assert_eq!(plain.next_lease_end(0), Some(700));
    }

    #[test]
    fn a_holder_with_a_lock_delay_keeps_its_room_quarantined_after_its_lease() {
        let mut set = SharedHolders::new(Mode::Semaphore(2));
        let delayed = Holding::pack_with(
            b"d",
            1,
            crate::holding::Extras {
                session: None,
                lock_delay_ms: 500,
                value: None,
            },
        )
        .unwrap();
        set.insert(delayed, 1_000).unwrap();
        set.insert(holding("p", 2), 1_000).unwrap();
        assert_eq!(set.holder(b"d").map(SharedHolder::deadline_ms), Some(1_000));
        assert_eq!(
            set.latest_deadline(),
            Some(1_500),
            "the key lasts the delay"
        );
        assert_eq!((set.live_count(1_200), set.holding_count(1_200)), (1, 0));
        assert!(set.live_holder(b"d", 1_200).is_none(), "holds nothing");
        assert_eq!(set.highest_fence(1_200), None);
        assert_eq!(
            set.take_ended(1_200)
                .iter()
                .map(|h| h.holding().fence())
                .collect::<Vec<_>>(),
            vec![2],
            "the plain holder leaves, the delayed one stays"
        );
        assert!(
            set.set_deadline(b"d", 3_000),
            "a renewal before the end moves both"
        );
        assert_eq!(set.earliest_deadline(), Some(3_500));
        assert_eq!(set.take_ended(3_501).len(), 1);
        assert!(set.is_empty());
    }

    fn holding(token: &str, fence: u64) -> Box<Holding> {
        Holding::pack(token.as_bytes(), fence).unwrap()
    }

    #[test]
    fn holders_have_their_own_leases() {
        let mut set = SharedHolders::new(Mode::Semaphore(3));
        set.put(holding("a", 1), 1_000).unwrap();
        set.put(holding("b", 2), 2_000).unwrap();
        assert_eq!(set.live_count(1_000), 2);
        assert_eq!(set.live_count(1_001), 1);
        assert!(set.live_holder(b"a", 1_001).is_none());
        assert_eq!(set.latest_deadline(), Some(2_000));
        assert_eq!(set.earliest_deadline(), Some(1_000));
        let ended = set.take_ended(1_001);
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].holding().fence(), 1);
        assert_eq!(set.all().len(), 1);
    }

    #[test]
    fn a_renewal_keeps_its_fence_and_place() {
        let mut set = SharedHolders::new(Mode::Shared);
        set.put(holding("a", 1), 1_000).unwrap();
        set.put(holding("b", 2), 1_000).unwrap();
        set.put(holding("a", 9), 5_000).unwrap();
        let fences: Vec<u64> = set.all().map(|h| h.holding().fence()).collect();
        assert_eq!(fences, vec![1, 2]);
        assert_eq!(
            set.live_holder(b"a", 4_000).map(SharedHolder::deadline_ms),
            Some(5_000)
        );
        assert_eq!(set.highest_fence(4_000), Some(1));
        assert_eq!(set.highest_fence(900), Some(2));
    }

    #[test]
    fn a_token_holds_once_and_a_fence_belongs_to_one_holder() {
        let mut set = SharedHolders::new(Mode::Shared);
        set.insert(holding("a", 1), 1).unwrap();
        set.insert(holding("b", 2), 1).unwrap();
        assert!(set.holds_token_of(&holding("a", 7)));
        assert!(!set.holds_token_of(&holding("c", 7)));
        assert_eq!(set.insert(holding("c", 2), 1), Err(FenceTaken));
        assert_eq!(set.put(holding("c", 1), 1), Err(FenceTaken));
        assert_eq!(set.len(), 2);
        assert!(set.holder(b"c").is_none());
    }

    #[test]
    fn generated_and_chosen_tokens_are_found_by_their_spelling() {
        let mut set = SharedHolders::new(Mode::Shared);
        let generated = crate::token::generate();
        set.insert(Holding::pack(&generated, 1).unwrap(), 10)
            .unwrap();
        set.insert(holding("worker-1", 2), 20).unwrap();
        assert_eq!(set.holder(&generated).map(|h| h.holding().fence()), Some(1));
        assert_eq!(
            set.holder(b"worker-1").map(|h| h.holding().fence()),
            Some(2)
        );
        let upper = String::from_utf8(generated.clone()).unwrap().to_uppercase();
        assert!(set.holder(upper.as_bytes()).is_none());
        assert!(set.holder(b"worker-").is_none());
    }

    #[test]
    fn leases_in_end_order_give_the_next_end_the_latest_and_the_live_count() {
        let mut set = SharedHolders::new(Mode::Shared);
        for (i, deadline) in [(1u64, 500), (2, 100), (3, 900), (4, 100)] {
            set.insert(holding(&format!("t{i}"), i), deadline).unwrap();
        }
        assert_eq!(set.earliest_deadline(), Some(100));
        assert_eq!(set.latest_deadline(), Some(900));
        assert_eq!(set.live_count(100), 4);
        assert_eq!(set.live_count(101), 2);
        assert_eq!(set.highest_fence(901), None);
        assert_eq!(set.highest_fence(600), Some(3));
        assert!(set.set_deadline(b"t3", 50));
        assert_eq!(set.latest_deadline(), Some(500));
        assert_eq!(set.highest_fence(600), None);
        assert_eq!(set.highest_fence(400), Some(1));
        let ended: Vec<u64> = set
            .take_ended(101)
            .iter()
            .map(|h| h.holding().fence())
            .collect();
        assert_eq!(ended, vec![2, 3, 4], "in grant order");
        assert_eq!(set.earliest_deadline(), Some(500));
        assert!(set.holder(b"t2").is_none() && set.holder(b"t1").is_some());
    }

    #[test]
    fn a_set_moves_between_list_and_index_keeping_every_holder_in_order() {
        let mut set = SharedHolders::new(Mode::Shared);
        let fences =
            |set: &SharedHolders| -> Vec<u64> { set.all().map(|h| h.holding().fence()).collect() };
        for i in 1..=40u64 {
            let deadline = 1_000 + i64::try_from(i).unwrap();
            set.insert(holding(&format!("t{i}"), i * 10), deadline)
                .unwrap();
            assert_eq!(set.len(), usize::try_from(i).unwrap());
            assert_eq!(set.holder(b"t1").map(|h| h.deadline_ms()), Some(1_001));
        }
        // An explicit LOCK.APPLY may bring an older fence: it takes its place.
        set.insert(holding("old", 15), 5).unwrap();
        assert_eq!(set.insert(holding("dup", 20), 5), Err(FenceTaken));
        assert_eq!(fences(&set)[..3], [10, 15, 20]);
        assert_eq!(
            (set.earliest_deadline(), set.latest_deadline()),
            (Some(5), Some(1_040))
        );
        assert_eq!(set.live_count(1_000), 40);
        for i in 1..=35u64 {
            assert!(set.remove(format!("t{i}").as_bytes()).is_some(), "t{i}");
            assert!(set.holder(b"t40").is_some());
        }
        assert_eq!(fences(&set), vec![15, 360, 370, 380, 390, 400]);
        assert!(set.set_deadline(b"t36", 2_000));
        assert_eq!(set.latest_deadline(), Some(2_000));
        let ended: Vec<u64> = set
            .take_ended(6)
            .iter()
            .map(|h| h.holding().fence())
            .collect();
        assert_eq!(ended, vec![15]);
        assert_eq!(set.highest_fence(1_030), Some(400));
        assert_eq!(
            set.highest_fence(1_500),
            Some(360),
            "only t36 holds past 1,040"
        );
        assert_eq!(set.len(), 5);
    }

    #[test]
    fn a_watch_is_forgotten_when_a_lease_would_end_before_it() {
        let mut set = SharedHolders::new(Mode::Shared);
        set.put(holding("a", 1), 1_000).unwrap();
        set.set_watched_at(Some(1_001));
        set.insert(holding("b", 2), 5_000).unwrap();
        assert_eq!(
            set.watched_at(),
            Some(1_001),
            "a later lease keeps the watch"
        );
        assert!(set.take_ended(1_000).is_empty());
        set.set_deadline(b"b", 500);
        assert_eq!(
            set.watched_at(),
            None,
            "an earlier lease end needs a new timer"
        );
        assert_eq!(
            set.take_ended(600).len(),
            1,
            "and is dropped by a scan meanwhile"
        );
    }

    #[test]
    fn removal_keeps_grant_order_and_memory_follows_the_holders() {
        let mut set = SharedHolders::new(Mode::Shared);
        for i in 1..=100u64 {
            set.put(holding(&format!("t{i}"), i), 1_000).unwrap();
        }
        let full = set.allocated_bytes();
        for i in 1..=98u64 {
            assert!(set.remove(format!("t{i}").as_bytes()).is_some());
        }
        assert!(set.remove(b"t1").is_none());
        let fences: Vec<u64> = set.all().map(|h| h.holding().fence()).collect();
        assert_eq!(fences, vec![99, 100]);
        assert!(set.allocated_bytes() < full / 10);
    }

    #[test]
    fn each_holder_with_a_generated_token_costs_at_most_160_bytes() {
        let mut set = SharedHolders::new(Mode::Semaphore(1_000));
        set.put(Holding::pack(&crate::token::generate(), 1).unwrap(), 1)
            .unwrap();
        let one = set.allocated_bytes();
        for fence in 2..=1_000 {
            set.put(Holding::pack(&crate::token::generate(), fence).unwrap(), 1)
                .unwrap();
        }
        let per_holder = (set.allocated_bytes() - one) / 999;
        assert!(per_holder <= 160, "{per_holder} bytes per holder");
    }
}
