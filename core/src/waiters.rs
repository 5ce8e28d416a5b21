//! The bookkeeping of every client waiting for a lock: one FIFO queue per key, an index
//! from each waiting client to its place, and the per-key timing state of the handoff.
//! Generic over the key (`K`), the client handle (`C`) and what is kept per waiter
//! (`W`), so the module stores Redis handles here and the tests plain numbers.
//!
//! Every waiter is in exactly one queue and in the index, or in neither: each way out
//! (`pop_first`, `take`, `remove_key`) removes it from both, which is what lets the
//! module unblock each client exactly once.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::wait_queue::{Ticket, WaitQueue};

/// The waiters of one key, and when its handoff is next looked at.
#[derive(Debug)]
pub struct KeyQueue<C, W> {
    queue: WaitQueue<(C, W)>,
    /// The Unix ms at which the current expiry check for this key fires. Checks that
    /// were superseded by an earlier one still fire, see a different time here, and do
    /// nothing.
    pub expiry_check: Option<i64>,
    /// A settle of this queue (after a change Redis announced) is already scheduled.
    pub settle_scheduled: bool,
}

impl<C, W> Default for KeyQueue<C, W> {
    fn default() -> Self {
        Self {
            queue: WaitQueue::default(),
            expiry_check: None,
            settle_scheduled: false,
        }
    }
}

#[derive(Debug)]
pub struct Waiters<K, C, W> {
    keys: HashMap<K, KeyQueue<C, W>>,
    /// Where each queued client stands.
    queued: HashMap<C, (K, Ticket)>,
    next_ticket: Ticket,
    /// Client ids handed a lock whose reply has not been sent yet.
    replies_pending: HashSet<u64>,
}

impl<K, C, W> Default for Waiters<K, C, W> {
    fn default() -> Self {
        Self {
            keys: HashMap::new(),
            queued: HashMap::new(),
            next_ticket: 0,
            replies_pending: HashSet::new(),
        }
    }
}

impl<K: Clone + Eq + Hash, C: Copy + Eq + Hash, W> Waiters<K, C, W> {
    /// Queues `client` last for `key`; its ticket names this very wait (handles may be
    /// reused by later clients, tickets never are).
    pub fn enqueue(&mut self, key: K, client: C, waiter: W) -> Ticket {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.queued.insert(client, (key.clone(), ticket));
        self.keys
            .entry(key)
            .or_default()
            .queue
            .push(ticket, (client, waiter));
        ticket
    }

    /// Takes the first waiter of `key`.
    pub fn pop_first(&mut self, key: &K) -> Option<(C, W)> {
        let waiting = self.keys.get_mut(key)?;
        let (_, (client, waiter)) = waiting.queue.pop_front()?;
        if waiting.queue.is_empty() {
            self.keys.remove(key);
        }
        self.queued.remove(&client);
        Some((client, waiter))
    }

    /// Takes a queued client out (with `ticket`: only if it is still that very wait).
    pub fn take(&mut self, client: C, ticket: Option<Ticket>) -> Option<W> {
        let (key, queued_ticket) = self.queued.get(&client)?.clone();
        if ticket.is_some_and(|ticket| ticket != queued_ticket) {
            return None;
        }
        self.queued.remove(&client);
        let waiting = self.keys.get_mut(&key)?;
        let removed = waiting.queue.remove(queued_ticket);
        if waiting.queue.is_empty() {
            self.keys.remove(&key);
        }
        removed.map(|(_, waiter)| waiter)
    }

    /// Takes every waiter of `key`, in queue order.
    pub fn remove_key(&mut self, key: &K) -> Vec<(C, W)> {
        let Some(mut waiting) = self.keys.remove(key) else {
            return Vec::new();
        };
        let mut all = Vec::with_capacity(waiting.queue.len());
        while let Some((_, (client, waiter))) = waiting.queue.pop_front() {
            self.queued.remove(&client);
            all.push((client, waiter));
        }
        all
    }

    /// A queued client's waiter, if it is still that very wait.
    pub fn get_mut(&mut self, client: C, ticket: Ticket) -> Option<&mut W> {
        let (key, queued_ticket) = self.queued.get(&client)?;
        if *queued_ticket != ticket {
            return None;
        }
        self.keys
            .get_mut(key)?
            .queue
            .get_mut(ticket)
            .map(|(_, waiter)| waiter)
    }

    pub fn is_queued(&self, client: C, ticket: Ticket) -> bool {
        self.queued.get(&client).is_some_and(|(_, t)| *t == ticket)
    }

    /// Waiters for `key`.
    pub fn count(&self, key: &K) -> usize {
        self.keys.get(key).map_or(0, |k| k.queue.len())
    }

    /// Waiters for all keys.
    pub fn total(&self) -> usize {
        self.queued.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// The timing state of `key`'s queue, while it has waiters.
    pub fn key_mut(&mut self, key: &K) -> Option<&mut KeyQueue<C, W>> {
        self.keys.get_mut(key)
    }

    /// Every key somebody waits for.
    pub fn keys(&self) -> Vec<K> {
        self.keys.keys().cloned().collect()
    }

    /// The client with this id was handed a lock; its reply is on its way.
    pub fn reply_pending(&mut self, client_id: u64) {
        self.replies_pending.insert(client_id);
    }

    /// The reply was sent, or will never be.
    pub fn reply_settled(&mut self, client_id: u64) {
        self.replies_pending.remove(&client_id);
    }

    pub fn is_reply_pending(&self, client_id: u64) -> bool {
        self.replies_pending.contains(&client_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Book = Waiters<&'static str, u32, &'static str>;

    #[test]
    fn first_come_first_served_per_key() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a");
        book.enqueue("other", 2, "b");
        book.enqueue("k", 3, "c");
        assert_eq!(book.count(&"k"), 2);
        assert_eq!(book.total(), 3);
        assert_eq!(book.pop_first(&"k"), Some((1, "a")));
        assert_eq!(book.pop_first(&"k"), Some((3, "c")));
        assert_eq!(book.pop_first(&"k"), None);
        assert_eq!(book.keys(), vec!["other"]);
    }

    #[test]
    fn a_client_leaves_once_whichever_way_comes_first() {
        let mut book = Book::default();
        let ticket = book.enqueue("k", 1, "a");
        assert_eq!(
            book.take(1, Some(ticket + 1)),
            None,
            "another wait of a reused handle"
        );
        assert_eq!(book.take(1, Some(ticket)), Some("a"));
        assert_eq!(book.take(1, None), None);
        assert_eq!(book.pop_first(&"k"), None);
        assert!(book.is_empty());
        assert!(book.keys().is_empty());
    }

    #[test]
    fn a_reused_handle_is_a_new_wait() {
        let mut book = Book::default();
        let first = book.enqueue("k", 1, "a");
        assert_eq!(book.pop_first(&"k"), Some((1, "a")));
        let second = book.enqueue("k", 1, "b");
        assert!(!book.is_queued(1, first));
        assert!(book.is_queued(1, second));
        assert_eq!(book.get_mut(1, first), None);
        assert_eq!(book.get_mut(1, second).map(|w| *w), Some("b"));
    }

    #[test]
    fn removing_a_key_takes_its_whole_queue_in_order() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a");
        book.enqueue("k", 2, "b");
        book.enqueue("j", 3, "c");
        assert_eq!(book.remove_key(&"k"), vec![(1, "a"), (2, "b")]);
        assert_eq!(book.total(), 1);
        assert_eq!(book.take(1, None), None);
    }

    #[test]
    fn pending_replies_are_tracked_by_client_id() {
        let mut book = Book::default();
        book.reply_pending(7);
        assert!(book.is_reply_pending(7));
        book.reply_settled(7);
        assert!(!book.is_reply_pending(7));
    }
}
