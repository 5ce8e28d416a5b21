//! A FIFO queue with O(1) push, O(1) removal of any member by ticket, and amortised
//! O(1) pop of the oldest live member. Pure; the wait registry (`wait_registry`) keeps
//! one per key.

use std::collections::{HashMap, VecDeque};

use crate::capacity::trim;

/// Identifies one queued entry for removal (timeouts, disconnects).
pub type Ticket = u64;

#[derive(Debug)]
pub struct FifoQueue<T> {
    order: VecDeque<Ticket>,
    entries: HashMap<Ticket, T>,
}

impl<T> Default for FifoQueue<T> {
    fn default() -> Self {
        Self {
            order: VecDeque::new(),
            entries: HashMap::new(),
        }
    }
}

impl<T> FifoQueue<T> {
    /// Appends `entry` under `ticket`; tickets must be unique across the queue's life.
    pub fn push(&mut self, ticket: Ticket, entry: T) {
        self.order.push_back(ticket);
        self.entries.insert(ticket, entry);
    }

    /// Removes an entry wherever it stands. Its slot in `order` is skipped lazily, and
    /// swept out once dead slots outnumber live ones: a queue whose head stays while
    /// others come and go keeps memory in proportion to its live entries, each sweep
    /// paid for by the removals before it (amortised O(1)).
    pub fn remove(&mut self, ticket: Ticket) -> Option<T> {
        let removed = self.entries.remove(&ticket);
        if self.entries.is_empty() {
            self.order.clear();
        } else if self.order.len() > 2 * self.entries.len() + 32 {
            let entries = &self.entries;
            self.order.retain(|ticket| entries.contains_key(ticket));
        }
        trim(&mut self.order);
        trim(&mut self.entries);
        removed
    }

    /// The entry under `ticket`, to update it in place.
    pub fn get_mut(&mut self, ticket: Ticket) -> Option<&mut T> {
        self.entries.get_mut(&ticket)
    }

    /// The oldest live entry, left in place (dead slots before it are swept).
    pub fn front(&mut self) -> Option<&T> {
        while let Some(ticket) = self.order.front() {
            if self.entries.contains_key(ticket) {
                return self.entries.get(ticket);
            }
            self.order.pop_front();
        }
        None
    }

    /// The ticket of the oldest live entry, left in place (dead slots before it are
    /// swept).
    pub fn front_ticket(&mut self) -> Option<Ticket> {
        self.front()?;
        self.order.front().copied()
    }

    /// Takes the oldest live entry.
    pub fn pop_front(&mut self) -> Option<(Ticket, T)> {
        while let Some(ticket) = self.order.pop_front() {
            if let Some(entry) = self.entries.remove(&ticket) {
                trim(&mut self.entries);
                trim(&mut self.order);
                return Some((ticket, entry));
            }
        }
        None
    }

    /// The tickets of the live entries, oldest first. Walks this queue only: its live
    /// entries and at most as many dead slots (plus a few), as `remove` sweeps them.
    pub fn tickets(&self) -> impl Iterator<Item = Ticket> + '_ {
        self.order
            .iter()
            .copied()
            .filter(|ticket| self.entries.contains_key(ticket))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::FifoQueue;

    #[test]
    fn the_front_is_the_oldest_live_entry_and_stays() {
        let mut queue = FifoQueue::default();
        queue.push(1, "a");
        queue.push(2, "b");
        assert_eq!(queue.remove(1), Some("a"));
        assert_eq!(queue.front(), Some(&"b"));
        assert_eq!(queue.front(), Some(&"b"));
        assert_eq!(queue.pop_front(), Some((2, "b")));
        assert_eq!(queue.front(), None);
    }

    #[test]
    fn pops_in_arrival_order_skipping_removed_entries() {
        let mut queue = FifoQueue::default();
        for ticket in 1..=5 {
            queue.push(ticket, ticket * 10);
        }
        assert_eq!(queue.remove(2), Some(20));
        assert_eq!(queue.remove(2), None);
        assert_eq!(queue.len(), 4);
        let popped: Vec<u64> = std::iter::from_fn(|| queue.pop_front().map(|(t, _)| t)).collect();
        assert_eq!(popped, vec![1, 3, 4, 5]);
        assert!(queue.is_empty());
    }

    #[test]
    fn removing_everything_releases_the_order_slots() {
        let mut queue = FifoQueue::default();
        for ticket in 0..10_000 {
            queue.push(ticket, ());
        }
        for ticket in 0..10_000 {
            queue.remove(ticket);
        }
        assert!(queue.order.is_empty());
        assert_eq!(queue.pop_front(), None);
    }

    #[test]
    fn memory_follows_the_live_entries_while_the_queue_never_empties() {
        let mut queue = FifoQueue::default();
        queue.push(0, ());
        for ticket in 1..1_000_000 {
            queue.push(ticket, ());
            queue.remove(ticket);
        }
        assert_eq!(queue.len(), 1);
        assert!(queue.order.len() <= 64, "{} order slots", queue.order.len());
        assert!(
            queue.order.capacity() <= 256,
            "{} capacity",
            queue.order.capacity()
        );
        assert_eq!(queue.pop_front().map(|(ticket, _)| ticket), Some(0));
    }
}
