//! The holders of a small shared lock (most semaphores, a few readers): a list in fence
//! (grant) order, searched by a scan. Up to `MOST` holders a scan costs less than
//! hashing a token and walking trees, and a holder costs 16 bytes beside its holding;
//! past it the set moves to `HolderIndex`.

use super::holder::SharedHolder;
use crate::holding::{Holding, Offered};

/// The most holders a list keeps before the set is indexed instead.
pub(crate) const MOST: usize = 32;

#[derive(Debug, Default)]
pub(crate) struct HolderList {
    /// Sorted by fence.
    holders: Vec<SharedHolder>,
}

impl HolderList {
    pub(crate) fn from_holders(holders: Vec<SharedHolder>) -> Self {
        Self { holders }
    }

    pub(crate) fn len(&self) -> usize {
        self.holders.len()
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, SharedHolder> {
        self.holders.iter()
    }

    fn position(&self, fence: u64) -> Result<usize, usize> {
        self.holders
            .binary_search_by_key(&fence, |h| h.holding().fence())
    }

    pub(crate) fn get(&self, fence: u64) -> Option<&SharedHolder> {
        self.position(fence)
            .ok()
            .and_then(|at| self.holders.get(at))
    }

    pub(crate) fn contains_fence(&self, fence: u64) -> bool {
        self.position(fence).is_ok()
    }

    pub(crate) fn fence_of(&self, offered: &Offered) -> Option<u64> {
        self.holders
            .iter()
            .find(|h| h.holding().is_offered(offered))
            .map(|h| h.holding().fence())
    }

    pub(crate) fn fence_of_holding(&self, holding: &Holding) -> Option<u64> {
        self.holders
            .iter()
            .find(|h| h.holding().same_token(holding))
            .map(|h| h.holding().fence())
    }

    /// Adds a holder whose fence and token are not here yet (at the end, unless an
    /// explicit `LOCK.APPLY` brought an older fence).
    pub(crate) fn insert(&mut self, holder: SharedHolder) {
        let at = self
            .position(holder.holding().fence())
            .unwrap_or_else(|at| at);
        self.holders.insert(at, holder);
    }

    pub(crate) fn move_deadline(&mut self, fence: u64, occupied_until_ms: i64) {
        if let Some(holder) = self
            .position(fence)
            .ok()
            .and_then(|at| self.holders.get_mut(at))
        {
            holder.occupied_until_ms = occupied_until_ms;
        }
    }

    pub(crate) fn remove(&mut self, fence: u64) -> Option<SharedHolder> {
        let at = self.position(fence).ok()?;
        let removed = self.holders.remove(at);
        if self.holders.capacity() > 2 * self.holders.len() + 4 {
            self.holders
                .shrink_to(self.holders.len() + self.holders.len() / 2 + 1);
        }
        Some(removed)
    }

    /// How many holders' lease ended before `now_ms`.
    pub(crate) fn count_ended(&self, now_ms: i64) -> usize {
        self.holders.iter().filter(|h| !h.occupies(now_ms)).count()
    }

    /// Fences of the holders whose lease ended before `now_ms`.
    pub(crate) fn ended_fences(&self, now_ms: i64) -> Vec<u64> {
        self.holders
            .iter()
            .filter(|h| !h.occupies(now_ms))
            .map(|h| h.holding().fence())
            .collect()
    }

    pub(crate) fn latest_deadline(&self) -> Option<i64> {
        self.holders.iter().map(|h| h.occupied_until_ms).max()
    }

    pub(crate) fn earliest_deadline(&self) -> Option<i64> {
        self.holders.iter().map(|h| h.occupied_until_ms).min()
    }

    /// Bytes of the list (holdings not included).
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.holders.capacity() * std::mem::size_of::<SharedHolder>()
    }

    pub(crate) fn into_holders(self) -> Vec<SharedHolder> {
        self.holders
    }
}
