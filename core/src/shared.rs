//! The holders of a lock held shared (a read-write lock's readers, or a semaphore's
//! permits): each with its own token, fence and lease. Pure: the deadlines are Unix
//! milliseconds passed in and compared with a `now` passed in.
//!
//! Holders are kept in grant order, which is fence order (a renewal keeps its place):
//! a primary and its replicas apply the same grants and removals, so they keep the same
//! order, and saving, digesting and rewriting walk it as it is. Lookups by token are a
//! linear scan: per holder there are 16 bytes here plus the packed holding (32 bytes for
//! a generated token), which an index would double; semaphores are small, and the scan
//! compares in constant time per holder.

use crate::holding::{Holding, Offered, OwnedHolding};
use crate::mode::Mode;

/// One shared holder.
#[derive(Debug)]
pub struct SharedHolder {
    holding: OwnedHolding,
    /// When its lease ends (Unix ms); it holds while `now <= deadline_ms`, as Redis keys do.
    deadline_ms: i64,
}

impl SharedHolder {
    pub fn holding(&self) -> &Holding {
        &self.holding
    }

    pub fn deadline_ms(&self) -> i64 {
        self.deadline_ms
    }

    pub fn is_live(&self, now_ms: i64) -> bool {
        now_ms <= self.deadline_ms
    }
}

/// Every shared holder of one lock. `repr(C)` with the tag first: a lock value's first
/// eight bytes tell a set of shared holders (zero) from an exclusive holding (its fence,
/// never zero); see `value`.
#[repr(C)]
#[derive(Debug)]
pub struct SharedHolders {
    tag: u64,
    /// 0: plain `SHARED`; n: a semaphore of n.
    limit: u32,
    /// When the module's lease-end timer for this set fires (0: none armed). Kept at or
    /// before the earliest holder's end (+1 ms): a deadline set earlier forgets it. So
    /// until then no holder has ended, which spares the write paths a scan. Not saved.
    watched_at: i64,
    holders: Vec<SharedHolder>,
}

/// The value of `SharedHolders::tag`.
pub(crate) const SHARED_TAG: u64 = 0;

impl SharedHolders {
    /// An empty set in `mode` (shared or a semaphore; exclusive is stored as shared).
    pub fn new(mode: Mode) -> Box<SharedHolders> {
        Box::new(SharedHolders {
            tag: SHARED_TAG,
            limit: mode.stored_limit(),
            watched_at: 0,
            holders: Vec::new(),
        })
    }

    pub fn mode(&self) -> Mode {
        Mode::from_stored_limit(self.limit)
    }

    /// Every holder, live or with an ended lease not yet removed, in grant order.
    pub fn all(&self) -> &[SharedHolder] {
        &self.holders
    }

    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }

    /// Holders whose lease has not ended.
    pub fn live(&self, now_ms: i64) -> impl Iterator<Item = &SharedHolder> {
        self.holders.iter().filter(move |h| h.is_live(now_ms))
    }

    pub fn live_count(&self, now_ms: i64) -> usize {
        self.live(now_ms).count()
    }

    /// The live holder with `token`.
    pub fn live_holder(&self, token: &[u8], now_ms: i64) -> Option<&SharedHolder> {
        self.holder(token).filter(|h| h.is_live(now_ms))
    }

    /// The holder with `token`, whether its lease ended or not.
    pub fn holder(&self, token: &[u8]) -> Option<&SharedHolder> {
        self.position(token).and_then(|at| self.holders.get(at))
    }

    /// Where the holder with `token` stands (the token decoded once for the scan).
    fn position(&self, token: &[u8]) -> Option<usize> {
        let offered = Offered::new(token);
        self.holders
            .iter()
            .position(|h| h.holding.is_offered(&offered))
    }

    /// The highest fence among live holders.
    pub fn highest_fence(&self, now_ms: i64) -> Option<u64> {
        self.live(now_ms).map(|h| h.holding.fence()).max()
    }

    /// Adds a holder, or moves the deadline of the one with the same token (a renewal,
    /// or a replayed effect); its fence stays the one it was granted.
    pub fn put(&mut self, holding: Box<Holding>, deadline_ms: i64) {
        if let Some(existing) = self
            .holders
            .iter_mut()
            .find(|h| h.holding.same_token(&holding))
        {
            existing.deadline_ms = deadline_ms;
            self.deadline_set(deadline_ms);
            return;
        }
        self.push_new(holding, deadline_ms);
    }

    /// Adds a holder whose token holds nothing here (a freshly generated one): no scan.
    pub fn push_new(&mut self, holding: Box<Holding>, deadline_ms: i64) {
        self.holders.push(SharedHolder {
            holding: OwnedHolding::new(holding),
            deadline_ms,
        });
        self.deadline_set(deadline_ms);
    }

    /// Whether two holders carry one token (only a corrupt payload can say so: every
    /// write path keeps tokens unique). Sorts, so a load of n holders stays n log n.
    pub fn has_repeated_token(&self) -> bool {
        let mut tokens: Vec<&[u8]> = self
            .holders
            .iter()
            .map(|h| h.holding.stored_form())
            .collect();
        tokens.sort_unstable();
        tokens.windows(2).any(|pair| pair[0] == pair[1])
    }

    /// When the lease-end timer fires, if one is armed (see `watched_at`).
    pub fn watched_at(&self) -> Option<i64> {
        (self.watched_at != 0).then_some(self.watched_at)
    }

    /// A lease-end timer fires at `at` (at most the earliest end + 1), or none (`None`).
    pub fn set_watched_at(&mut self, at: Option<i64>) {
        self.watched_at = at.unwrap_or(0);
    }

    /// A holder's lease now ends at `deadline_ms`: a timer armed for later no longer
    /// fires before every end.
    fn deadline_set(&mut self, deadline_ms: i64) {
        if self.watched_at > deadline_ms.saturating_add(1) {
            self.watched_at = 0;
        }
    }

    /// Moves the deadline of the holder with `token`; false if there is none.
    pub fn set_deadline(&mut self, token: &[u8], deadline_ms: i64) -> bool {
        match self.position(token).and_then(|at| self.holders.get_mut(at)) {
            Some(holder) => {
                holder.deadline_ms = deadline_ms;
                self.deadline_set(deadline_ms);
                true
            }
            None => false,
        }
    }

    /// Removes the holder with `token`, live or not.
    pub fn remove(&mut self, token: &[u8]) -> Option<SharedHolder> {
        let at = self
            .holders
            .iter()
            .position(|h| h.holding.is_token(token))?;
        let removed = self.holders.remove(at);
        self.shrink();
        Some(removed)
    }

    /// Removes every holder whose lease ended before `now_ms`, in grant order.
    pub fn take_ended(&mut self, now_ms: i64) -> Vec<SharedHolder> {
        let none_ended_yet = self.watched_at().is_some_and(|at| now_ms < at);
        if none_ended_yet || self.holders.iter().all(|h| h.is_live(now_ms)) {
            return Vec::new();
        }
        let (live, ended) = std::mem::take(&mut self.holders)
            .into_iter()
            .partition(|h| h.is_live(now_ms));
        self.holders = live;
        self.shrink();
        ended
    }

    /// The latest deadline: the key's own expiry.
    pub fn latest_deadline(&self) -> Option<i64> {
        self.holders.iter().map(|h| h.deadline_ms).max()
    }

    /// The earliest deadline: when a holder next leaves by itself.
    pub fn earliest_deadline(&self) -> Option<i64> {
        self.holders.iter().map(|h| h.deadline_ms).min()
    }

    /// Bytes allocated for the set and every holding (for `MEMORY USAGE`).
    pub fn allocated_bytes(&self) -> usize {
        std::mem::size_of::<SharedHolders>()
            + self.holders.capacity() * std::mem::size_of::<SharedHolder>()
            + self
                .holders
                .iter()
                .map(|h| h.holding.allocated_bytes())
                .sum::<usize>()
    }

    /// Gives back spare capacity once the set shrank to under half of it.
    fn shrink(&mut self) {
        if self.holders.capacity() > 2 * self.holders.len() + 4 {
            self.holders
                .shrink_to(self.holders.len() + self.holders.len() / 2 + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(token: &str, fence: u64) -> Box<Holding> {
        Holding::pack(token.as_bytes(), fence).unwrap()
    }

    #[test]
    fn holders_have_their_own_leases() {
        let mut set = SharedHolders::new(Mode::Semaphore(3));
        set.put(holding("a", 1), 1_000);
        set.put(holding("b", 2), 2_000);
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
        set.put(holding("a", 1), 1_000);
        set.put(holding("b", 2), 1_000);
        set.put(holding("a", 9), 5_000);
        let fences: Vec<u64> = set.all().iter().map(|h| h.holding().fence()).collect();
        assert_eq!(fences, vec![1, 2]);
        assert_eq!(
            set.live_holder(b"a", 4_000).map(SharedHolder::deadline_ms),
            Some(5_000)
        );
        assert_eq!(set.highest_fence(4_000), Some(1));
        assert_eq!(set.highest_fence(900), Some(2));
    }

    #[test]
    fn repeated_tokens_are_found() {
        let mut set = SharedHolders::new(Mode::Shared);
        set.push_new(holding("a", 1), 1);
        set.push_new(holding("b", 2), 1);
        assert!(!set.has_repeated_token());
        set.push_new(holding("a", 3), 1);
        assert!(set.has_repeated_token());
    }

    #[test]
    fn a_watch_is_forgotten_when_a_lease_would_end_before_it() {
        let mut set = SharedHolders::new(Mode::Shared);
        set.put(holding("a", 1), 1_000);
        set.set_watched_at(Some(1_001));
        set.push_new(holding("b", 2), 5_000);
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
            set.put(holding(&format!("t{i}"), i), 1_000);
        }
        let full = set.allocated_bytes();
        for i in 1..=98u64 {
            assert!(set.remove(format!("t{i}").as_bytes()).is_some());
        }
        assert!(set.remove(b"t1").is_none());
        let fences: Vec<u64> = set.all().iter().map(|h| h.holding().fence()).collect();
        assert_eq!(fences, vec![99, 100]);
        assert!(set.allocated_bytes() < full / 10);
    }

    #[test]
    fn each_holder_with_a_generated_token_costs_at_most_64_bytes() {
        let mut set = SharedHolders::new(Mode::Semaphore(1_000));
        set.put(Holding::pack(&crate::token::generate(), 1).unwrap(), 1);
        let one = set.allocated_bytes();
        for fence in 2..=1_000 {
            set.put(Holding::pack(&crate::token::generate(), fence).unwrap(), 1);
        }
        let per_holder = (set.allocated_bytes() - one) / 999;
        assert!(per_holder <= 64, "{per_holder} bytes per holder");
    }
}
