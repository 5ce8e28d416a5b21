//! The bookkeeping of every client waiting for locks: one FIFO queue per key, each wait
//! (one client's blocked acquire, of one key or of several at once) standing in the
//! queue of every key it asks for, an index from each waiting client to its wait, an
//! index of client-chosen tokens per key, one of waits per owner (for deadlock
//! detection, `deadlock`), and the per-key timing state of the handoff. Generic over the
//! key (`K`), the client handle (`C`), what is kept per waiter (`W`) and the handle of a
//! timer (`T`), so the module stores Redis handles here and the tests plain numbers.
//!
//! One arrival order for all keys: a wait's ticket is drawn from one counter and names
//! it in every queue it stands in, so every queue is ordered by ticket, and of two
//! waits that share keys the older is ahead in all of them. Two waits therefore never
//! wait for each other inside the queues.
//!
//! Every wait is in all its queues and in the indexes, or in none: each way out
//! (`pop_first`, `take`, `take_ticket`, `take_same_token`, `take_where`,
//! `take_from_key_where`, `remove_key`)
//! removes it from all of them, which is what lets the module unblock each client
//! exactly once. A queue that empties hands its pending handoff timer to
//! `abandoned_timers`, for the module to stop: a timer must not outlive its queue (it
//! holds memory until it fires, up to a day).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::Hash;

use crate::capacity::trim;
use crate::deadlock::{EarliestWait, OwnerWait, QueuedWait};
use crate::fifo_queue::{FifoQueue, Ticket};
use crate::mode::Mode;
use crate::owner::Owner;

/// What a waiter tells the bookkeeping about itself.
pub trait Waiter {
    /// The token it asked for (`TOKEN`), if it chose one.
    fn token(&self) -> Option<&[u8]>;
    /// The session it asked to hold in (`SESSION`), if any.
    fn session(&self) -> Option<&[u8]>;
    /// The mode it asked for.
    fn mode(&self) -> Mode;
}

/// When a key's handoff is next looked at, and by which timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpiryCheck<T> {
    /// The Unix ms at which it fires.
    pub fires_at: i64,
    pub timer: T,
}

/// The queue of one key, and when its handoff is next looked at.
#[derive(Debug)]
pub struct KeyQueue<T> {
    queue: FifoQueue<()>,
    /// Tickets of single-key waits that chose their token, by token.
    by_token: HashMap<Vec<u8>, Vec<Ticket>>,
    /// How many of the waits asked to hold shared (`LOCK.INFO` counts both kinds
    /// without walking the queue).
    shared: usize,
    /// Waits that asked for anything but plain `SHARED`: the latest one before a shared
    /// waiter is the one it waits behind (`deadlock`).
    unshared: BTreeSet<Ticket>,
    /// Its waits that asked for an exclusive lock: the only ones a plain `SHARED` wait
    /// granted before them does not get past in the same step (a semaphore wait behind
    /// shared holders is refused).
    exclusive: BTreeSet<Ticket>,
    /// Waits that can lead a deadlock search out of this queue: those of several keys,
    /// and those whose owner waits elsewhere too. A search skips every other wait, whose
    /// owner waits for nothing this queue does not already show (`deadlock`).
    linked: BTreeSet<Ticket>,
    /// How many of the linked waits each owner has: a search for one owner skips a
    /// queue whose linked waits are all its own (one session's many waits for one key).
    linked_owners: HashMap<Owner, usize>,
    /// The pending expiry check of this key, if any.
    pub expiry_check: Option<ExpiryCheck<T>>,
    /// A settle of this queue (after a change Redis announced) is already scheduled.
    pub settle_scheduled: bool,
}

impl<T> Default for KeyQueue<T> {
    fn default() -> Self {
        Self {
            queue: FifoQueue::default(),
            by_token: HashMap::new(),
            shared: 0,
            unshared: BTreeSet::new(),
            exclusive: BTreeSet::new(),
            linked: BTreeSet::new(),
            linked_owners: HashMap::new(),
            expiry_check: None,
            settle_scheduled: false,
        }
    }
}

impl<T> KeyQueue<T> {
    /// Counts `ticket` of `owner` among the linked waits, or no longer.
    fn link(&mut self, ticket: Ticket, owner: &Owner, linked: bool) {
        if linked {
            if self.linked.insert(ticket) {
                *self.linked_owners.entry(owner.clone()).or_default() += 1;
            }
        } else if self.linked.remove(&ticket) {
            if let Some(count) = self.linked_owners.get_mut(owner) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.linked_owners.remove(owner);
                    trim(&mut self.linked_owners);
                }
            }
        }
    }

    /// The oldest wait of this queue.
    fn front(&mut self) -> Option<Ticket> {
        self.queue.front_ticket()
    }

    /// The latest wait before `ticket` that asked for anything but plain `SHARED`.
    fn last_unshared_before(&self, ticket: Ticket) -> Option<Ticket> {
        self.unshared.range(..ticket).next_back().copied()
    }

    /// The latest wait before `ticket` that asked for an exclusive lock.
    fn last_exclusive_before(&self, ticket: Ticket) -> Option<Ticket> {
        self.exclusive.range(..ticket).next_back().copied()
    }
}

/// One client's blocked acquire.
#[derive(Debug)]
struct Wait<K, C, W> {
    client: C,
    /// Every key it asks for, in the order asked.
    keys: Vec<K>,
    waiter: W,
    owner: Owner,
}

/// The first wait of a key, left in its place.
pub struct Head<'a, K, W> {
    pub ticket: Ticket,
    pub waiter: &'a W,
    /// Every key the wait asks for.
    pub keys: &'a [K],
}

/// A wait taken out of every queue.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken<K, C, W> {
    pub client: C,
    pub keys: Vec<K>,
    pub waiter: W,
}

#[derive(Debug)]
pub struct Waiters<K, C, W, T> {
    keys: HashMap<K, KeyQueue<T>>,
    waits: HashMap<Ticket, Wait<K, C, W>>,
    /// The wait of each queued client.
    queued: HashMap<C, Ticket>,
    /// The waits of each owner that chose a session or a token.
    owners: HashMap<Owner, BTreeSet<Ticket>>,
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
            waits: HashMap::new(),
            queued: HashMap::new(),
            owners: HashMap::new(),
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
        self.enqueue_all(vec![key], client, waiter)
    }

    /// Queues `client` last in the queue of each of `keys` (distinct), under one ticket.
    pub fn enqueue_all(&mut self, keys: Vec<K>, client: C, waiter: W) -> Ticket {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let owner = Owner::of_waiter(waiter.session(), waiter.token(), ticket);
        let mode = waiter.mode();
        let single_token = waiter
            .token()
            .filter(|_| keys.len() == 1)
            .map(<[u8]>::to_vec);
        for key in &keys {
            let waiting = self.keys.entry(key.clone()).or_default();
            waiting.queue.push(ticket, ());
            waiting.shared += usize::from(mode.is_shared());
            if mode != Mode::Shared {
                waiting.unshared.insert(ticket);
            }
            if mode == Mode::Exclusive {
                waiting.exclusive.insert(ticket);
            }
            if let Some(token) = &single_token {
                waiting
                    .by_token
                    .entry(token.clone())
                    .or_default()
                    .push(ticket);
            }
        }
        self.queued.insert(client, ticket);
        let multi_key = keys.len() > 1;
        self.waits.insert(
            ticket,
            Wait {
                client,
                keys,
                waiter,
                owner: owner.clone(),
            },
        );
        let mut linked = multi_key;
        if !matches!(owner, Owner::Alone(_)) {
            let of_owner = self.owners.entry(owner).or_default();
            of_owner.insert(ticket);
            let waits = of_owner.len();
            // The owner's other wait now leads elsewhere too.
            let other = of_owner.first().copied().filter(|_| waits == 2);
            if let Some(other) = other {
                self.set_linked(other, true);
            }
            linked |= waits > 1;
        }
        if linked {
            self.set_linked(ticket, true);
        }
        ticket
    }

    /// Marks (or unmarks) wait `ticket` as linked in each of its queues.
    fn set_linked(&mut self, ticket: Ticket, linked: bool) {
        let Some(wait) = self.waits.get(&ticket) else {
            return;
        };
        for key in &wait.keys {
            if let Some(waiting) = self.keys.get_mut(key) {
                waiting.link(ticket, &wait.owner, linked);
            }
        }
    }

    /// Takes wait `ticket` out of every queue and index.
    pub fn take_ticket(&mut self, ticket: Ticket) -> Option<Taken<K, C, W>> {
        let wait = self.waits.remove(&ticket)?;
        trim(&mut self.waits);
        let mode = wait.waiter.mode();
        let single_token = wait.waiter.token().filter(|_| wait.keys.len() == 1);
        for key in &wait.keys {
            let Some(waiting) = self.keys.get_mut(key) else {
                continue;
            };
            waiting.queue.remove(ticket);
            if mode.is_shared() {
                waiting.shared = waiting.shared.saturating_sub(1);
            }
            waiting.unshared.remove(&ticket);
            waiting.exclusive.remove(&ticket);
            waiting.link(ticket, &wait.owner, false);
            if let Some(token) = single_token {
                if let Some(tickets) = waiting.by_token.get_mut(token) {
                    tickets.retain(|t| *t != ticket);
                    if tickets.is_empty() {
                        waiting.by_token.remove(token);
                        trim(&mut waiting.by_token);
                    }
                }
            }
            self.drop_if_empty(key);
        }
        if self.queued.get(&wait.client) == Some(&ticket) {
            self.queued.remove(&wait.client);
            trim(&mut self.queued);
        }
        self.forget_owner_wait(&wait.owner, ticket);
        Some(Taken {
            client: wait.client,
            keys: wait.keys,
            waiter: wait.waiter,
        })
    }

    /// Forgets that `owner` waits under `ticket`; an owner left with one wait no longer
    /// links it elsewhere.
    fn forget_owner_wait(&mut self, owner: &Owner, ticket: Ticket) {
        let Some(of_owner) = self.owners.get_mut(owner) else {
            return;
        };
        of_owner.remove(&ticket);
        let last = of_owner.first().copied();
        match of_owner.len() {
            0 => {
                self.owners.remove(owner);
                trim(&mut self.owners);
            }
            1 => {
                let single_key = last
                    .and_then(|last| self.waits.get(&last))
                    .is_some_and(|w| w.keys.len() == 1);
                if let (Some(last), true) = (last, single_key) {
                    self.set_linked(last, false);
                }
            }
            _ => {}
        }
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

    /// The first wait of `key`, left in its place.
    pub fn head(&mut self, key: &K) -> Option<Head<'_, K, W>> {
        let ticket = self.keys.get_mut(key)?.front()?;
        let wait = self.waits.get(&ticket)?;
        Some(Head {
            ticket,
            waiter: &wait.waiter,
            keys: &wait.keys,
        })
    }

    /// The position (among its keys) of the first key whose queue wait `ticket` does
    /// not stand first in, if any.
    pub fn not_first_at(&mut self, ticket: Ticket) -> Option<usize> {
        let wait = self.waits.get(&ticket)?;
        let queues = &mut self.keys;
        wait.keys.iter().position(|key| {
            queues
                .get_mut(key)
                .and_then(KeyQueue::front)
                .is_none_or(|front| front != ticket)
        })
    }

    /// The key at `position` among the keys of wait `ticket`, and whether the wait
    /// stands first in that key's queue (it stays first once it is: nobody queues
    /// before an earlier ticket). A wait for several keys looks at its keys one at a
    /// time from where it last stopped, never copying them all.
    pub fn key_at(&mut self, ticket: Ticket, position: usize) -> Option<(K, bool)> {
        let key = self.waits.get(&ticket)?.keys.get(position)?.clone();
        let first = self
            .keys
            .get_mut(&key)
            .and_then(KeyQueue::front)
            .is_some_and(|front| front == ticket);
        Some((key, first))
    }

    /// Waiters for `key` that asked to hold shared.
    pub fn count_shared(&self, key: &K) -> usize {
        self.keys.get(key).map_or(0, |k| k.shared)
    }

    /// Takes the first wait of `key` out of every queue.
    pub fn pop_first(&mut self, key: &K) -> Option<Taken<K, C, W>> {
        let ticket = self.keys.get_mut(key)?.front()?;
        self.take_ticket(ticket)
    }

    /// Takes a queued client out (with `ticket`: only if it is still that very wait),
    /// with the keys it waited for, whose next waiters may fit now.
    pub fn take(&mut self, client: C, ticket: Option<Ticket>) -> Option<Taken<K, C, W>> {
        let queued_ticket = *self.queued.get(&client)?;
        if ticket.is_some_and(|ticket| ticket != queued_ticket) {
            return None;
        }
        self.take_ticket(queued_ticket)
    }

    /// Takes every single-key wait of `key` that asked with `token`, in queue order: the
    /// same client again (a retry on a new connection), now that `token` holds the lock.
    /// A wait for several keys stays: at its turn it renews this holding with the rest.
    pub fn take_same_token(&mut self, key: &K, token: &[u8]) -> Vec<Taken<K, C, W>> {
        let Some(waiting) = self.keys.get_mut(key) else {
            return Vec::new();
        };
        let mut tickets = waiting.by_token.remove(token).unwrap_or_default();
        trim(&mut waiting.by_token);
        tickets.sort_unstable();
        tickets
            .into_iter()
            .filter_map(|ticket| self.take_ticket(ticket))
            .collect()
    }

    /// The keys with a waiter that `wanted` picks, each once.
    pub fn keys_where(&self, wanted: impl Fn(&W) -> bool) -> Vec<K> {
        let mut keys: Vec<K> = Vec::new();
        let mut seen: HashSet<&K> = HashSet::new();
        for wait in self.waits.values().filter(|wait| wanted(&wait.waiter)) {
            for key in &wait.keys {
                if seen.insert(key) {
                    keys.push(key.clone());
                }
            }
        }
        keys
    }

    /// Takes every wait, of any keys, that `wanted` picks (`LOCK.CLOSE`: those of one
    /// session), in arrival order. Walks every wait.
    pub fn take_where(&mut self, wanted: impl Fn(&W) -> bool) -> Vec<Taken<K, C, W>> {
        let mut picked: Vec<Ticket> = self
            .waits
            .iter()
            .filter(|(_, wait)| wanted(&wait.waiter))
            .map(|(ticket, _)| *ticket)
            .collect();
        picked.sort_unstable();
        picked
            .into_iter()
            .filter_map(|ticket| self.take_ticket(ticket))
            .collect()
    }

    /// Takes every wait standing in `key`'s queue that `wanted` picks (`LOCK.DONE`: the
    /// run-once duplicates of that key), in queue order. Walks that one queue, not
    /// every wait of the server: a key's answer costs in proportion to its own waits.
    pub fn take_from_key_where(
        &mut self,
        key: &K,
        wanted: impl Fn(&W) -> bool,
    ) -> Vec<Taken<K, C, W>> {
        let Some(waiting) = self.keys.get(key) else {
            return Vec::new();
        };
        let picked: Vec<Ticket> = waiting
            .queue
            .tickets()
            .filter(|ticket| {
                self.waits
                    .get(ticket)
                    .is_some_and(|wait| wanted(&wait.waiter))
            })
            .collect();
        picked
            .into_iter()
            .filter_map(|ticket| self.take_ticket(ticket))
            .collect()
    }

    /// Takes every wait that stands in `key`'s queue out of every queue, in queue order.
    pub fn remove_key(&mut self, key: &K) -> Vec<Taken<K, C, W>> {
        let mut all = Vec::new();
        while let Some(taken) = self.pop_first(key) {
            all.push(taken);
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
        if self.queued.get(&client) != Some(&ticket) {
            return None;
        }
        self.waits.get_mut(&ticket).map(|wait| &mut wait.waiter)
    }

    /// The waiter of wait `ticket`, to update it in place.
    pub fn waiter_mut(&mut self, ticket: Ticket) -> Option<&mut W> {
        self.waits.get_mut(&ticket).map(|wait| &mut wait.waiter)
    }

    pub fn is_queued(&self, client: C, ticket: Ticket) -> bool {
        self.queued.get(&client) == Some(&ticket)
    }

    /// Waiters for `key`.
    pub fn count(&self, key: &K) -> usize {
        self.keys.get(key).map_or(0, |k| k.queue.len())
    }

    /// Waiting clients, across all keys.
    pub fn total(&self) -> usize {
        self.queued.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// The timing state of `key`'s queue, while it has waiters.
    pub fn key_mut(&mut self, key: &K) -> Option<&mut KeyQueue<T>> {
        self.keys.get_mut(key)
    }

    /// Every key somebody waits for.
    pub fn keys(&self) -> Vec<K> {
        self.keys.keys().cloned().collect()
    }

    /// The ticket the next wait will get (later than every queued one).
    pub fn next_ticket(&self) -> Ticket {
        self.next_ticket
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

/// What deadlock detection reads of the queues (`deadlock::WaitGraph`, without holders).
impl<K: Clone + Eq + Hash, C: Copy + Eq + Hash, W: Waiter, T: Copy> Waiters<K, C, W, T> {
    /// The oldest wait in `key`'s queue.
    pub fn queue_front(&mut self, key: &K) -> Option<Ticket> {
        self.keys.get_mut(key)?.front()
    }

    /// The latest wait before `before` in `key`'s queue that asked for anything but
    /// plain `SHARED`.
    pub fn last_unshared_before(&self, key: &K, before: Ticket) -> Option<Ticket> {
        self.keys.get(key)?.last_unshared_before(before)
    }

    /// The latest wait before `before` in `key`'s queue that asked for an exclusive
    /// lock.
    pub fn last_exclusive_before(&self, key: &K, before: Ticket) -> Option<Ticket> {
        self.keys.get(key)?.last_exclusive_before(before)
    }

    /// The linked waits of `key`'s queue with tickets in `from..to` whose owner is
    /// `worth` looking at.
    pub fn linked_between(
        &self,
        key: &K,
        from: Ticket,
        to: Ticket,
        worth: &dyn Fn(&Owner) -> bool,
    ) -> Vec<QueuedWait> {
        let Some(waiting) = self.keys.get(key) else {
            return Vec::new();
        };
        if from >= to {
            return Vec::new();
        }
        waiting
            .linked
            .range(from..to)
            .filter_map(|ticket| {
                let wait = self.waits.get(ticket).filter(|wait| worth(&wait.owner))?;
                Some(QueuedWait {
                    ticket: *ticket,
                    owner: wait.owner.clone(),
                    mode: wait.waiter.mode(),
                    keys: wait.keys.len(),
                })
            })
            .collect()
    }

    /// Whether a linked wait of `key`'s queue belongs to another owner than `owner`.
    pub fn linked_other_than(&self, key: &K, owner: &Owner) -> bool {
        self.keys.get(key).is_some_and(|waiting| {
            let owners = &waiting.linked_owners;
            owners.len() > 1 || (owners.len() == 1 && !owners.contains_key(owner))
        })
    }

    /// Whether `owner` waits for anything.
    pub fn has_waits(&self, owner: &Owner) -> bool {
        match owner {
            Owner::Alone(ticket) => self.waits.contains_key(ticket),
            _ => self.owners.contains_key(owner),
        }
    }

    /// Whether wait `ticket` is one of `owner`'s.
    pub fn owns(&self, owner: &Owner, ticket: Ticket) -> bool {
        self.waits
            .get(&ticket)
            .is_some_and(|wait| wait.owner == *owner)
    }

    /// For each key `owner` waits for, its earliest wait there, and its earliest wait
    /// for several keys there.
    pub fn earliest_waits(&self, owner: &Owner) -> Vec<EarliestWait<K>> {
        let tickets: Vec<Ticket> = match owner {
            Owner::Alone(ticket) => vec![*ticket],
            _ => self
                .owners
                .get(owner)
                .map_or_else(Vec::new, |tickets| tickets.iter().copied().collect()),
        };
        let mut earliest: HashMap<&K, EarliestWait<K>> = HashMap::new();
        for ticket in tickets {
            let Some(wait) = self.waits.get(&ticket) else {
                continue;
            };
            let several = wait.keys.len() > 1;
            for key in &wait.keys {
                let entry = earliest.entry(key).or_insert_with(|| EarliestWait {
                    key: key.clone(),
                    any: ticket,
                    several: None,
                });
                if several && entry.several.is_none() {
                    entry.several = Some(ticket);
                }
            }
        }
        earliest.into_values().collect()
    }

    /// Every wait of `owner` that a deadlock search needs, latest first: of its
    /// single-key waits in one mode other than plain `SHARED` for one key, only the
    /// latest, which waits for all the earlier ones do (one session's thousands of
    /// waits for one key are one).
    pub fn owner_waits(&self, owner: &Owner) -> Vec<OwnerWait<K>> {
        let alone;
        let tickets: Box<dyn Iterator<Item = &Ticket>> = match owner {
            Owner::Alone(ticket) => {
                alone = [*ticket];
                Box::new(alone.iter())
            }
            _ => match self.owners.get(owner) {
                Some(tickets) => Box::new(tickets.iter().rev()),
                None => Box::new(std::iter::empty()),
            },
        };
        let mut seen: HashSet<(&K, Mode)> = HashSet::new();
        tickets
            .filter_map(|ticket| {
                let wait = self.waits.get(ticket)?;
                let mode = wait.waiter.mode();
                if let ([key], false) = (wait.keys.as_slice(), mode == Mode::Shared) {
                    if !seen.insert((key, mode)) {
                        return None;
                    }
                }
                Some(OwnerWait {
                    ticket: *ticket,
                    keys: wait.keys.clone(),
                    mode,
                })
            })
            .collect()
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

        fn session(&self) -> Option<&[u8]> {
            None
        }

        /// Test waiters whose name ends in `+` asked to hold shared.
        fn mode(&self) -> Mode {
            if self.ends_with('+') {
                Mode::Shared
            } else {
                Mode::Exclusive
            }
        }
    }

    type Book = Waiters<&'static str, u32, &'static str, u8>;

    fn pair(taken: Option<Taken<&'static str, u32, &'static str>>) -> Option<(u32, &'static str)> {
        taken.map(|taken| (taken.client, taken.waiter))
    }

    #[test]
    fn the_first_waiter_can_be_looked_at_before_it_is_taken() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a");
        book.enqueue("k", 2, "b+");
        assert_eq!(book.head(&"k").map(|h| h.waiter), Some(&"a"));
        assert_eq!(book.count_shared(&"k"), 1);
        assert_eq!(pair(book.pop_first(&"k")), Some((1, "a")));
        assert_eq!(book.head(&"k").map(|h| h.waiter), Some(&"b+"));
        assert_eq!(book.head(&"other").map(|h| h.waiter), None);
    }

    #[test]
    fn first_come_first_served_per_key() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a");
        book.enqueue("other", 2, "b");
        book.enqueue("k", 3, "c");
        assert_eq!(book.count(&"k"), 2);
        assert_eq!(book.total(), 3);
        assert_eq!(pair(book.pop_first(&"k")), Some((1, "a")));
        assert_eq!(pair(book.pop_first(&"k")), Some((3, "c")));
        assert_eq!(pair(book.pop_first(&"k")), None);
        assert_eq!(book.keys(), vec!["other"]);
    }

    #[test]
    fn a_wait_for_several_keys_stands_in_each_queue_in_one_arrival_order() {
        let mut book = Book::default();
        book.enqueue("a", 1, "x");
        let both = book.enqueue_all(vec!["a", "b"], 2, "y");
        book.enqueue("b", 3, "z");
        assert_eq!(
            (book.count(&"a"), book.count(&"b"), book.total()),
            (2, 2, 3)
        );
        assert_eq!(book.head(&"b").map(|head| head.ticket), Some(both));
        assert_eq!(
            book.head(&"b").map(|head| head.keys.to_vec()),
            Some(vec!["a", "b"])
        );
        assert_eq!(book.not_first_at(both), Some(0), "x stands before it in a");
        assert_eq!(book.key_at(both, 0), Some(("a", false)));
        assert_eq!(book.key_at(both, 1), Some(("b", true)));
        assert_eq!(book.key_at(both, 2), None);
        assert_eq!(pair(book.pop_first(&"a")), Some((1, "x")));
        assert_eq!(book.not_first_at(both), None);
        assert_eq!(book.key_at(both, 0), Some(("a", true)));
        let taken = book.pop_first(&"b");
        assert_eq!(
            taken,
            Some(Taken {
                client: 2,
                keys: vec!["a", "b"],
                waiter: "y"
            })
        );
        assert_eq!((book.count(&"a"), book.count(&"b")), (0, 1));
        assert_eq!(book.keys(), vec!["b"]);
        assert_eq!(book.head(&"b").map(|h| h.waiter), Some(&"z"));
    }

    #[test]
    fn a_client_leaves_once_whichever_way_comes_first() {
        let mut book = Book::default();
        let ticket = book.enqueue_all(vec!["k", "j"], 1, "a");
        assert_eq!(
            pair(book.take(1, Some(ticket + 1))),
            None,
            "another wait of a reused handle"
        );
        let taken = book.take(1, Some(ticket));
        assert_eq!(taken.map(|taken| taken.keys), Some(vec!["k", "j"]));
        assert_eq!(pair(book.take(1, None)), None);
        assert_eq!(pair(book.pop_first(&"k")), None);
        assert_eq!(pair(book.pop_first(&"j")), None);
        assert!(book.is_empty());
        assert!(book.keys().is_empty());
    }

    #[test]
    fn a_reused_handle_is_a_new_wait() {
        let mut book = Book::default();
        let first = book.enqueue("k", 1, "a");
        assert_eq!(pair(book.pop_first(&"k")), Some((1, "a")));
        let second = book.enqueue("k", 1, "b");
        assert!(!book.is_queued(1, first));
        assert!(book.is_queued(1, second));
        assert_eq!(book.get_mut(1, first), None);
        assert_eq!(book.get_mut(1, second).map(|w| *w), Some("b"));
    }

    #[test]
    fn removing_a_key_takes_its_whole_queue_in_order_out_of_every_queue() {
        let mut book = Book::default();
        book.enqueue("k", 1, "a");
        book.enqueue_all(vec!["k", "i"], 2, "b");
        book.enqueue("j", 3, "c");
        let removed: Vec<_> = book
            .remove_key(&"k")
            .into_iter()
            .map(|t| t.client)
            .collect();
        assert_eq!(removed, vec![1, 2]);
        assert_eq!(book.total(), 1);
        assert_eq!(book.count(&"i"), 0);
        assert_eq!(pair(book.take(1, None)), None);
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
        assert_eq!(pair(book.pop_first(&"k")), Some((1, "a+")));
        let same: Vec<_> = book
            .take_same_token(&"k", b"w+")
            .into_iter()
            .map(|t| t.client)
            .collect();
        assert_eq!(same, vec![3]);
        assert_eq!(book.count_shared(&"k"), 1);
        assert_eq!(pair(book.take(4, None)), Some((4, "c+")));
        assert_eq!((book.count_shared(&"k"), book.count(&"k")), (0, 1));
    }

    #[test]
    fn a_token_granted_takes_its_other_single_key_waits_along() {
        let mut book = Book::default();
        book.enqueue("k", 1, "t:w");
        book.enqueue("k", 2, "t:x");
        book.enqueue("k", 3, "t:w");
        book.enqueue_all(vec!["k", "m"], 6, "t:w");
        assert_eq!(pair(book.pop_first(&"k")), Some((1, "t:w")));
        let same: Vec<_> = book
            .take_same_token(&"k", b"w")
            .into_iter()
            .map(|t| t.client)
            .collect();
        assert_eq!(same, vec![3], "the wait for two keys stays queued");
        assert!(book.take_same_token(&"k", b"w").is_empty());
        book.enqueue("j", 4, "t:x");
        book.enqueue("k", 5, "t:x");
        let mut keys = book.keys_where(|waiter| *waiter == "t:x");
        keys.sort();
        assert_eq!(keys, vec!["j", "k"]);
        let taken: Vec<_> = book
            .take_where(|waiter| *waiter == "t:x")
            .into_iter()
            .map(|t| (t.keys, t.client))
            .collect();
        assert_eq!(taken, vec![(vec!["k"], 2), (vec!["j"], 4), (vec!["k"], 5)]);
        assert!(book.take_where(|waiter| *waiter == "t:x").is_empty());
        assert_eq!(book.total(), 1);
        book.take(6, None);
        assert!(book.keys().is_empty());
    }

    #[test]
    fn a_keys_picked_waits_are_taken_in_queue_order_and_only_from_its_queue() {
        let mut book = Book::default();
        book.enqueue("k", 1, "t:x");
        book.enqueue("j", 2, "t:x");
        book.enqueue("k", 3, "t:w");
        book.enqueue("k", 4, "t:x");
        book.enqueue_all(vec!["j", "k"], 5, "t:x");
        // A wait that left the queue leaves a dead slot there: it is skipped.
        book.take(1, None);
        book.enqueue("k", 6, "t:x");
        let taken: Vec<_> = book
            .take_from_key_where(&"k", |waiter| *waiter == "t:x")
            .into_iter()
            .map(|t| (t.keys, t.client))
            .collect();
        assert_eq!(
            taken,
            vec![(vec!["k"], 4), (vec!["j", "k"], 5), (vec!["k"], 6)],
            "a wait for several keys leaves every queue it stood in"
        );
        assert_eq!(book.count(&"k"), 1, "the wait not picked stays");
        assert_eq!(book.count(&"j"), 1, "another key's waits stay");
        assert!(book
            .take_from_key_where(&"k", |waiter| *waiter == "t:x")
            .is_empty());
        assert!(book.take_from_key_where(&"none", |_| true).is_empty());
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
        assert_eq!(pair(book.take(1, None)), Some((1, "a")));
        assert_eq!(book.take_abandoned_timers(), vec![7]);
        book.enqueue("j", 2, "b");
        if let Some(queue) = book.key_mut(&"j") {
            queue.expiry_check = Some(ExpiryCheck {
                fires_at: 10,
                timer: 8,
            });
        }
        assert_eq!(book.remove_key(&"j").len(), 1);
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

    #[test]
    fn waits_are_linked_while_they_ask_for_several_keys_or_their_owner_waits_twice() {
        let mut book = Book::default();
        let lone = book.enqueue("k", 1, "t:w");
        let linked = |book: &Book, key| book.linked_between(&key, 0, 100, &|_| true);
        assert!(linked(&book, "k").is_empty());
        let second = book.enqueue("j", 2, "t:w");
        assert_eq!(linked(&book, "k").len(), 1, "its owner waits for j too");
        assert_eq!(linked(&book, "j")[0].ticket, second);
        book.take(2, None);
        assert!(linked(&book, "k").is_empty());
        let both = book.enqueue_all(vec!["k", "j"], 3, "x");
        assert_eq!(linked(&book, "j")[0].ticket, both);
        assert_eq!(linked(&book, "k")[0].keys, 2);
        assert_eq!(
            book.owner_waits(&Owner::Token(b"w".to_vec()))[0].ticket,
            lone
        );
        assert_eq!(
            book.owner_waits(&Owner::Alone(both))[0].keys,
            vec!["k", "j"]
        );
        assert_eq!(book.last_unshared_before(&"k", both), Some(lone));
        assert_eq!(book.last_exclusive_before(&"k", both), Some(lone));
        book.take(1, None);
        assert_eq!(book.last_exclusive_before(&"k", both + 1), Some(both));
        book.take(3, None);
        assert_eq!(book.last_exclusive_before(&"k", both + 1), None);
    }
}
