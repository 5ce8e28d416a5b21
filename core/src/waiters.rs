//! The bookkeeping of every client waiting for a lock: one FIFO queue per key, an index
//! from each waiting client to its place, an index of client-chosen tokens per key, and
//! the per-key timing state of the handoff. Generic over the key (`K`), the client
//! handle (`C`), what is kept per waiter (`W`) and the handle of a timer (`T`), so the
//! module stores Redis handles here and the tests plain numbers.
//!
//! Every waiter is in exactly one queue and in the index, or in neither: each way out
//! (`pop_first`, `take`, `take_same_token`, `remove_key`) removes it from both, which
//! is what lets the module unblock each client exactly once. A queue that empties
//! hands its pending handoff timer to `abandoned_timers`, for the module to stop: a
//! timer must not outlive its queue (it holds memory until it fires, up to a day).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::capacity::trim;
use crate::wait_queue::{Ticket, WaitQueue};

/// What a waiter tells the bookkeeping about itself.
pub trait Waiter {
    /// The token it asked for (`TOKEN`), if it chose one.
    fn token(&self) -> Option<&[u8]>;
    /// Whether it asked to hold shared (`SHARED` or `LIMIT n`).
    fn is_shared(&self) -> bool;
}

/// When a key's handoff is next looked at, and by which timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpiryCheck<T> {
    /// The Unix ms at which it fires.
    pub fires_at: i64,
    pub timer: T,
}

/// The waiters of one key, and when its handoff is next looked at.
#[derive(Debug)]
pub struct KeyQueue<C, W, T> {
    queue: WaitQueue<(C, W)>,
    /// Tickets of waiters that chose their token, by token.
    by_token: HashMap<Vec<u8>, Vec<Ticket>>,
    /// How many of the waiters asked to hold shared (`LOCK.INFO` counts both kinds
    /// without walking the queue).
    shared: usize,
    /// The pending expiry check of this key, if any.
    pub expiry_check: Option<ExpiryCheck<T>>,
    /// A settle of this queue (after a change Redis announced) is already scheduled.
    pub settle_scheduled: bool,
}

impl<C, W, T> Default for KeyQueue<C, W, T> {
    fn default() -> Self {
        Self {
            queue: WaitQueue::default(),
            by_token: HashMap::new(),
            shared: 0,
            expiry_check: None,
            settle_scheduled: false,
        }
    }
}

impl<C, W: Waiter, T> KeyQueue<C, W, T> {
    /// Forgets `ticket` in the token index and the counts (its waiter is leaving the
    /// queue).
    fn unindex(&mut self, ticket: Ticket, waiter: &W) {
        if waiter.is_shared() {
            self.shared = self.shared.saturating_sub(1);
        }
        let Some(token) = waiter.token() else {
            return;
        };
        if let Some(tickets) = self.by_token.get_mut(token) {
            tickets.retain(|t| *t != ticket);
            if tickets.is_empty() {
                self.by_token.remove(token);
                trim(&mut self.by_token);
            }
        }
    }
}

#[derive(Debug)]
pub struct Waiters<K, C, W, T> {
    keys: HashMap<K, KeyQueue<C, W, T>>,
    /// Where each queued client stands.
    queued: HashMap<C, (K, Ticket)>,
    next_ticket: Ticket,
    /// Client ids handed a lock whose reply has not been sent yet.
    replies_pending: HashSet<u64>,
    /// Expiry-check timers of queues that emptied, to be stopped.
    abandoned_timers: Vec<T>,
    /// Keys Redis changed where no context was at hand, to be settled.
    changed: Vec<K>,
}

impl<K, C, W, T> Default for Waiters<K, C, W, T> {
    fn default() -> Self {
        Self {
            keys: HashMap::new(),
            queued: HashMap::new(),
            next_ticket: 0,
            replies_pending: HashSet::new(),
            abandoned_timers: Vec::new(),
            changed: Vec::new(),
        }
    }
}

impl<K: Clone + Eq + Hash, C: Copy + Eq + Hash, W: Waiter, T: Copy> Waiters<K, C, W, T> {
    /// Queues `client` last for `key`; its ticket names this very wait (handles may be
    /// reused by later clients, tickets never are).
    pub fn enqueue(&mut self, key: K, client: C, waiter: W) -> Ticket {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.queued.insert(client, (key.clone(), ticket));
        let waiting = self.keys.entry(key).or_default();
        waiting.shared += usize::from(waiter.is_shared());
        if let Some(token) = waiter.token() {
            waiting
                .by_token
                .entry(token.to_vec())
                .or_default()
                .push(ticket);
        }
        waiting.queue.push(ticket, (client, waiter));
        ticket
    }

    /// Forgets where `client` stood (it left its queue).
    fn unqueue(&mut self, client: &C) {
        self.queued.remove(client);
        trim(&mut self.queued);
    }

    /// Drops `key`'s queue if it is empty, keeping its timer for `abandoned_timers`.
    fn drop_if_empty(&mut self, key: &K) {
        if self.keys.get(key).is_some_and(|k| k.queue.is_empty()) {
            if let Some(check) = self.keys.remove(key).and_then(|k| k.expiry_check) {
                self.abandoned_timers.push(check.timer);
            }
            trim(&mut self.keys);
        }
    }

    /// The first waiter of `key`, left in its place.
    pub fn first(&mut self, key: &K) -> Option<&W> {
        self.keys
            .get_mut(key)?
            .queue
            .front()
            .map(|(_, waiter)| waiter)
    }

    /// Waiters for `key` that asked to hold shared.
    pub fn count_shared(&self, key: &K) -> usize {
        self.keys.get(key).map_or(0, |k| k.shared)
    }

    /// Takes the first waiter of `key`.
    pub fn pop_first(&mut self, key: &K) -> Option<(C, W)> {
        let waiting = self.keys.get_mut(key)?;
        let (ticket, (client, waiter)) = waiting.queue.pop_front()?;
        waiting.unindex(ticket, &waiter);
        self.drop_if_empty(key);
        self.unqueue(&client);
        Some((client, waiter))
    }

    /// Takes a queued client out (with `ticket`: only if it is still that very wait);
    /// with the key it waited for, whose next waiters may fit now.
    pub fn take(&mut self, client: C, ticket: Option<Ticket>) -> Option<(K, W)> {
        let (key, queued_ticket) = self.queued.get(&client)?.clone();
        if ticket.is_some_and(|ticket| ticket != queued_ticket) {
            return None;
        }
        self.unqueue(&client);
        let waiting = self.keys.get_mut(&key)?;
        let removed = waiting.queue.remove(queued_ticket);
        if let Some((_, waiter)) = &removed {
            waiting.unindex(queued_ticket, waiter);
        }
        self.drop_if_empty(&key);
        removed.map(|(_, waiter)| (key, waiter))
    }

    /// Takes every waiter of `key` that asked with `token`, in queue order: the same
    /// client again (a retry on a new connection), now that `token` holds the lock.
    pub fn take_same_token(&mut self, key: &K, token: &[u8]) -> Vec<(C, W)> {
        let Some(waiting) = self.keys.get_mut(key) else {
            return Vec::new();
        };
        let tickets = waiting.by_token.remove(token).unwrap_or_default();
        trim(&mut waiting.by_token);
        let taken: Vec<(C, W)> = tickets
            .into_iter()
            .filter_map(|ticket| waiting.queue.remove(ticket))
            .collect();
        let shared = taken
            .iter()
            .filter(|(_, waiter)| waiter.is_shared())
            .count();
        waiting.shared = waiting.shared.saturating_sub(shared);
        for (client, _) in &taken {
            self.unqueue(client);
        }
        self.drop_if_empty(key);
        taken
    }

    /// The keys with a waiter that `wanted` picks, each once.
    pub fn keys_where(&self, wanted: impl Fn(&W) -> bool) -> Vec<K> {
        self.keys
            .iter()
            .filter(|(_, waiting)| waiting.queue.entries().any(|(_, waiter)| wanted(waiter)))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Takes every waiter, of any key, that `wanted` picks (`LOCK.CLOSE`: those of one
    /// session), each with the key it waited for. Walks every queue.
    pub fn take_where(&mut self, wanted: impl Fn(&W) -> bool) -> Vec<(K, C, W)> {
        let picked: Vec<C> = self
            .keys
            .values()
            .flat_map(|waiting| waiting.queue.entries())
            .filter(|(_, waiter)| wanted(waiter))
            .map(|(client, _)| *client)
            .collect();
        picked
            .into_iter()
            .filter_map(|client| {
                self.take(client, None)
                    .map(|(key, waiter)| (key, client, waiter))
            })
            .collect()
    }

    /// Takes every waiter of `key`, in queue order.
    pub fn remove_key(&mut self, key: &K) -> Vec<(C, W)> {
        let Some(mut waiting) = self.keys.remove(key) else {
            return Vec::new();
        };
        trim(&mut self.keys);
        if let Some(check) = waiting.expiry_check {
            self.abandoned_timers.push(check.timer);
        }
        let mut all = Vec::with_capacity(waiting.queue.len());
        while let Some((_, (client, waiter))) = waiting.queue.pop_front() {
            self.unqueue(&client);
            all.push((client, waiter));
        }
        all
    }

    /// Timers of queues that emptied since the last call, to be stopped.
    pub fn take_abandoned_timers(&mut self) -> Vec<T> {
        std::mem::take(&mut self.abandoned_timers)
    }

    /// Redis changed `key` where no context was at hand: settle it at the next chance
    /// (only a key somebody waits for is worth it).
    pub fn note_changed(&mut self, key: K) {
        if self.keys.contains_key(&key) {
            self.changed.push(key);
        }
    }

    /// Keys noted as changed since the last call.
    pub fn take_changed(&mut self) -> Vec<K> {
        std::mem::take(&mut self.changed)
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
    pub fn key_mut(&mut self, key: &K) -> Option<&mut KeyQueue<C, W, T>> {
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
        trim(&mut self.replies_pending);
    }

    pub fn is_reply_pending(&self, client_id: u64) -> bool {
        self.replies_pending.contains(&client_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Waiter for &'static str {
        /// Test waiters named `t:<token>` chose that token.
        fn token(&self) -> Option<&[u8]> {
            self.strip_prefix("t:").map(str::as_bytes)
        }

        /// Test waiters whose name ends in `+` asked to hold shared.
        fn is_shared(&self) -> bool {
            self.ends_with('+')
        }
    }

    type Book = Waiters<&'static str, u32, &'static str, u8>;

    #[test]
    fn the_first_waiter_can_be_looked_at_before_it_is_taken() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a");
        book.enqueue("k", 2, "b+");
        assert_eq!(book.first(&"k"), Some(&"a"));
        assert_eq!(book.count_shared(&"k"), 1);
        assert_eq!(book.pop_first(&"k"), Some((1, "a")));
        assert_eq!(book.first(&"k"), Some(&"b+"));
        assert_eq!(book.first(&"other"), None);
    }

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
        assert_eq!(book.take(1, Some(ticket)), Some(("k", "a")));
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

    #[test]
    fn shared_waiters_are_counted_whichever_way_they_leave() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a+");
        book.enqueue("k", 2, "b");
        book.enqueue("k", 3, "t:w+");
        book.enqueue("k", 4, "c+");
        assert_eq!(book.count_shared(&"k"), 3);
        assert_eq!(book.pop_first(&"k"), Some((1, "a+")));
        assert_eq!(book.take_same_token(&"k", b"w+"), vec![(3, "t:w+")]);
        assert_eq!(book.count_shared(&"k"), 1);
        assert_eq!(book.take(4, None), Some(("k", "c+")));
        assert_eq!((book.count_shared(&"k"), book.count(&"k")), (0, 1));
    }

    #[test]
    fn a_token_granted_takes_its_other_waits_along() {
        let mut book = Book::default();
        book.enqueue("k", 1, "t:w");
        book.enqueue("k", 2, "t:x");
        book.enqueue("k", 3, "t:w");
        assert_eq!(book.pop_first(&"k"), Some((1, "t:w")));
        assert_eq!(book.take_same_token(&"k", b"w"), vec![(3, "t:w")]);
        assert_eq!(book.take_same_token(&"k", b"w"), vec![]);
        book.enqueue("j", 4, "t:x");
        book.enqueue("k", 5, "t:x");
        let mut keys = book.keys_where(|waiter| *waiter == "t:x");
        keys.sort();
        assert_eq!(keys, vec!["j", "k"]);
        let mut taken = book.take_where(|waiter| *waiter == "t:x");
        taken.sort();
        assert_eq!(
            taken,
            vec![("j", 4, "t:x"), ("k", 2, "t:x"), ("k", 5, "t:x")]
        );
        assert!(book.take_where(|waiter| *waiter == "t:x").is_empty());
        assert_eq!(book.total(), 0);
        assert!(book.keys().is_empty());
    }

    #[test]
    fn an_emptied_queue_hands_back_its_timer() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a");
        if let Some(queue) = book.key_mut(&"k") {
            queue.expiry_check = Some(ExpiryCheck {
                fires_at: 10,
                timer: 7,
            });
        }
        assert_eq!(book.take_abandoned_timers(), vec![]);
        assert_eq!(book.take(1, None).map(|(_, w)| w), Some("a"));
        assert_eq!(book.take_abandoned_timers(), vec![7]);
        book.enqueue("j", 2, "b");
        if let Some(queue) = book.key_mut(&"j") {
            queue.expiry_check = Some(ExpiryCheck {
                fires_at: 10,
                timer: 8,
            });
        }
        assert_eq!(book.remove_key(&"j"), vec![(2, "b")]);
        assert_eq!(book.take_abandoned_timers(), vec![8]);
    }

    #[test]
    fn changes_are_noted_only_for_keys_somebody_waits_for() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a");
        book.note_changed("k");
        book.note_changed("nobody");
        assert_eq!(book.take_changed(), vec!["k"]);
        assert_eq!(book.take_changed(), Vec::<&str>::new());
    }
}
