//! Deadlock detection: whether a wait about to begin would wait, through other owners,
//! for its own owner — and so forever. Run when a wait begins, never later.
//!
//! The wait-for graph is one of owners (a session, else a token; `owner`). A wait
//! waits for:
//! - the owners of the holdings of each key it asks for, unless those admit its mode and
//!   nobody it waits for stands before it in that key's queue;
//! - the owners of the waits before it in each key's queue that it waits for
//!   (`owner::waits_for_queued`: all but plain-shared single-key waits, for a plain
//!   shared waiter; all of them otherwise);
//! - for a plain shared waiter behind a plain shared wait for several keys with no
//!   exclusive waiter between them, whatever that wait waits for in each of its keys
//!   (`owner::waits_through_queued`): both are granted in the same step once that wait
//!   is (a semaphore waiter between them is refused then). Not its owner, unless a
//!   waiter of another mode stands between them, which waits for that owner.
//!
//! An owner waits for whatever any of its waits waits for. A new wait whose owner is
//! reachable from what it would wait for is refused. What it would wait for in the very
//! keys it asks for under its own owner (another thread of the same session holding
//! such a key, or queued for it) is left out: that one is waited out, not refused. The
//! same goes however the search comes back to the owner in those keys: another owner's
//! wait there waits for that holding (or those waits) just as the new wait does, so the
//! path through it is that same dependency. Only reaching the owner in another key
//! closes a cycle (`Search::closes_in`).
//!
//! Why checking when a wait begins is enough: a cycle needs an edge that closes it, and
//! only two things add edges. A new wait adds its own, and is checked here. A grant adds
//! edges *into* the owner it grants to, from the waits still queued for that key: each
//! of them waited for that owner already while it stood ahead of them (a queued wait
//! that others wait for keeps its place until it is granted, so the same owners wait
//! for it as a holder), and the owner's own wait just ended. An acquire granted at once
//! adds none: a key with anyone queued admits nobody new. A release, an expiry or a
//! timeout only removes edges. The argument is for owners that block while they wait
//! (one wait at a time): `core/tests/deadlock_model.rs` drives such owners through
//! random acquires, releases and FIFO handoffs and checks that the graph never has a
//! cycle. An owner waiting in several threads at once can see a grant to one of them
//! close a cycle through another; its waits' `BLOCK` timeouts end it.
//!
//! Cost: bounded by what the new wait reaches. A key's queue is not walked: the search
//! looks only at the waits that can lead out of it (`linked`: waits for several keys,
//! or of an owner with other waits), since any other wait's owner waits for nothing
//! the queue's holders and earlier waits do not already show; and each key's queue is
//! looked at once per ticket range.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::fifo_queue::Ticket;
use crate::mode::Mode;
use crate::owner::Owner;

/// A wait of some queue, as the search sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedWait {
    pub ticket: Ticket,
    pub owner: Owner,
    pub mode: Mode,
    /// How many keys it asks for.
    pub keys: usize,
}

/// A wait of one owner, with every key it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerWait<K> {
    pub ticket: Ticket,
    pub keys: Vec<K>,
    pub mode: Mode,
}

/// Where an owner first waits in one key's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarliestWait<K> {
    pub key: K,
    pub any: Ticket,
    /// Its earliest wait there that asks for several keys.
    pub several: Option<Ticket>,
}

/// What the search reads: the queues (the module reads its registry, a step at a time,
/// never borrowed while it opens a key) and the holders of keys (read from Redis).
pub trait WaitGraph<K> {
    /// The oldest wait in `key`'s queue.
    fn front(&mut self, key: &K) -> Option<Ticket>;
    /// The latest wait before `before` in `key`'s queue that asked for anything but
    /// plain `SHARED`.
    fn last_unshared_before(&mut self, key: &K, before: Ticket) -> Option<Ticket>;
    /// The latest wait before `before` in `key`'s queue that asked for an exclusive
    /// lock.
    fn last_exclusive_before(&mut self, key: &K, before: Ticket) -> Option<Ticket>;
    /// Whether a linked wait of `key`'s queue belongs to another owner than `owner`.
    fn linked_other_than(&mut self, key: &K, owner: &Owner) -> bool;
    /// The linked waits of `key`'s queue with tickets in `from..to` whose owner is
    /// `worth` looking at.
    fn linked_between(
        &mut self,
        key: &K,
        from: Ticket,
        to: Ticket,
        worth: &dyn Fn(&Owner) -> bool,
    ) -> Vec<QueuedWait>;
    /// The waits of `owner` a search needs, latest first (of its single-key waits in
    /// one mode other than plain `SHARED` for one key, only the latest may be given).
    fn waits_of(&mut self, owner: &Owner) -> Vec<OwnerWait<K>>;
    /// For each key `owner` waits for, its earliest wait there, and its earliest wait
    /// for several keys there.
    fn earliest_waits(&mut self, owner: &Owner) -> Vec<EarliestWait<K>>;
    /// Whether wait `ticket` is one of `owner`'s.
    fn owns(&mut self, owner: &Owner, ticket: Ticket) -> bool;
    /// The owners of `key`'s live holdings, or none when they admit a holder in `mode`
    /// (unless `even_if_admitted`).
    fn holders(&mut self, key: &K, mode: Mode, even_if_admitted: bool) -> Vec<Owner>;
}

/// A wait that would close a cycle: asking for `asked` would wait, through other owners,
/// for `closes_at`, which its own owner holds (or waits for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle<K> {
    pub asked: K,
    pub closes_at: K,
}

/// Whether a wait of `owner` for `keys` in `mode`, about to be queued under `ticket`,
/// would close a cycle.
pub fn find_cycle<K: Clone + Eq + Hash>(
    graph: &mut impl WaitGraph<K>,
    owner: &Owner,
    keys: &[K],
    mode: Mode,
    ticket: Ticket,
) -> Option<Cycle<K>> {
    let mut search = Search {
        target: owner,
        asked: keys,
        target_waits: None,
        reached: HashSet::new(),
        to_visit: Vec::new(),
        covered: HashMap::new(),
        holders_read: HashSet::new(),
        through: HashSet::new(),
    };
    for key in keys {
        // A shared wait waits behind its owner's other waits only as far as it waits
        // for them itself: it is not led through them.
        let not_through = Some(owner).filter(|_| mode == Mode::Shared);
        let asked = QueueSpan::of(graph, key, ticket, mode, not_through);
        if let Some(cycle) = search.expand(graph, key, &asked, key, true) {
            return Some(cycle);
        }
    }
    while let Some((origin, reached)) = search.to_visit.pop() {
        let mut waits = graph.waits_of(&reached);
        // Latest first: in a queue, a later wait of an exclusive mode waits for all an
        // earlier one does, so the earlier ones of the same owner add nothing.
        waits.sort_unstable_by_key(|wait| std::cmp::Reverse(wait.ticket));
        for wait in waits {
            for key in &wait.keys {
                // A queue already looked at this far: only the target's own waits
                // there are left to see.
                if wait.mode != Mode::Shared && search.covers(key, wait.ticket) {
                    if search.closes_in(key)
                        && search.target_before(graph, key, wait.ticket, wait.ticket)
                    {
                        return Some(Cycle {
                            asked: origin,
                            closes_at: key.clone(),
                        });
                    }
                    continue;
                }
                let span = QueueSpan::of(graph, key, wait.ticket, wait.mode, None);
                if let Some(cycle) = search.expand(graph, key, &span, &origin, false) {
                    return Some(cycle);
                }
            }
        }
    }
    None
}

/// What one wait waits for in one key's queue: every wait before `all_before`, and what
/// the plain shared waits for several keys between `through_from` and the wait itself
/// (`bound`) wait for.
struct QueueSpan {
    mode: Mode,
    all_before: Ticket,
    through_from: Ticket,
    bound: Ticket,
    /// Whether anybody it waits for stands before it.
    someone_ahead: bool,
}

impl QueueSpan {
    /// `not_through`: an owner whose waits' own waiting the span does not take in.
    fn of<K>(
        graph: &mut impl WaitGraph<K>,
        key: &K,
        bound: Ticket,
        mode: Mode,
        not_through: Option<&Owner>,
    ) -> Self {
        if mode != Mode::Shared {
            let someone_ahead = graph.front(key).is_some_and(|front| front < bound);
            return QueueSpan {
                mode,
                all_before: bound,
                through_from: bound,
                bound,
                someone_ahead,
            };
        }
        // A plain shared waiter waits behind the latest waiter of another mode, which
        // waits for everyone before it.
        let latest = graph.last_unshared_before(key, bound);
        let behind = Self::skip_own(graph, latest, not_through, |graph, ticket| {
            graph.last_unshared_before(key, ticket)
        });
        // It is granted in the same step as the plain shared waits for several keys
        // after the latest exclusive waiter: a semaphore waiter between them is refused
        // once they hold the key (`lock::admits`). So it waits for what those wait for.
        let exclusive = graph.last_exclusive_before(key, bound);
        let barrier = Self::skip_own(graph, exclusive, not_through, |graph, ticket| {
            graph.last_exclusive_before(key, ticket)
        });
        QueueSpan {
            mode,
            all_before: behind.map_or(0, |ticket| ticket + 1),
            through_from: barrier.map_or(0, |ticket| ticket + 1),
            bound,
            someone_ahead: latest.is_some(),
        }
    }

    /// `found`, or the one before it that `earlier` finds, passing over the waits of
    /// `not_through`.
    fn skip_own<K, G: WaitGraph<K>>(
        graph: &mut G,
        found: Option<Ticket>,
        not_through: Option<&Owner>,
        earlier: impl Fn(&mut G, Ticket) -> Option<Ticket>,
    ) -> Option<Ticket> {
        let mut behind = found;
        while let Some(ticket) =
            behind.filter(|ticket| not_through.is_some_and(|owner| graph.owns(owner, *ticket)))
        {
            behind = earlier(graph, ticket);
        }
        behind
    }
}

struct Search<'a, K> {
    target: &'a Owner,
    /// The keys the new wait asks for: the target's holdings and waits there are waited
    /// out, by whichever path they are reached (see the module docs).
    asked: &'a [K],
    /// Where the target first waits in each key's queue, read when first needed.
    target_waits: Option<HashMap<K, (Ticket, Option<Ticket>)>>,
    reached: HashSet<Owner>,
    /// Owners reached and not yet looked at, each with the asked key that led there.
    to_visit: Vec<(K, Owner)>,
    /// Per key, the tickets below which its linked waits were looked at.
    covered: HashMap<K, Ticket>,
    /// Keys whose holders were read in full.
    holders_read: HashSet<K>,
    /// Waits for several keys whose own waiting was looked at (`through`).
    through: HashSet<Ticket>,
}

impl<K: Clone + Eq + Hash> Search<'_, K> {
    /// Whether reaching the target's holdings or waits in `key` closes a cycle: not in
    /// a key the new wait asks for, where that is the dependency the new wait has
    /// itself, on another thread of its own owner, and is waited out.
    fn closes_in(&self, key: &K) -> bool {
        !self.asked.contains(key)
    }

    /// Whether the target waits in `key`'s queue before `all_before`, or with a wait
    /// for several keys before `bound`.
    fn target_before(
        &mut self,
        graph: &mut impl WaitGraph<K>,
        key: &K,
        all_before: Ticket,
        bound: Ticket,
    ) -> bool {
        let target = self.target;
        let earliest = self.target_waits.get_or_insert_with(|| {
            graph
                .earliest_waits(target)
                .into_iter()
                .map(|wait| (wait.key, (wait.any, wait.several)))
                .collect()
        });
        earliest.get(key).is_some_and(|(any, several)| {
            *any < all_before || several.is_some_and(|several| several < bound)
        })
    }

    /// Whether `key`'s queue was looked at through the waits before `ticket` already,
    /// holders and all.
    fn covers(&self, key: &K, ticket: Ticket) -> bool {
        self.holders_read.contains(key) && self.covered.get(key).is_some_and(|at| *at >= ticket)
    }

    /// Looks at what a wait waits for in `key`'s queue. `first_hop`: the new wait's own,
    /// which leaves its own owner out (see the module docs).
    fn expand(
        &mut self,
        graph: &mut impl WaitGraph<K>,
        key: &K,
        span: &QueueSpan,
        origin: &K,
        first_hop: bool,
    ) -> Option<Cycle<K>> {
        let closes = || {
            Some(Cycle {
                asked: origin.clone(),
                closes_at: key.clone(),
            })
        };
        let multi_key: Vec<QueuedWait> = graph
            .linked_between(key, span.through_from, span.bound, &|_| true)
            .into_iter()
            .filter(|wait| wait.keys > 1 && wait.mode == Mode::Shared)
            .collect();
        let someone_ahead = span.someone_ahead || !multi_key.is_empty();
        if first_hop || !self.holders_read.contains(key) {
            let holders = graph.holders(key, span.mode, someone_ahead);
            if !first_hop && (someone_ahead || !holders.is_empty()) {
                self.holders_read.insert(key.clone());
            }
            for holder in holders {
                if holder == *self.target {
                    if !first_hop && self.closes_in(key) {
                        return closes();
                    }
                } else {
                    self.reach(holder, origin);
                }
            }
        }
        // The target's own linked waits are passed over in the new wait's own step, so
        // what is covered below is also what later steps need not walk again: they see
        // the target's own waits through `target_before`.
        let from = self.covered.get(key).copied().unwrap_or(0);
        // The new wait's own owner is left out: a queue where only it leads elsewhere
        // (its many waits for one key) is not walked.
        let target = self.target;
        let reached = &self.reached;
        let worth = |owner: &Owner| !reached.contains(owner) && (!first_hop || owner != target);
        let queued = if first_hop && !graph.linked_other_than(key, target) {
            Vec::new()
        } else {
            graph.linked_between(key, from, span.all_before, &worth)
        };
        if span.all_before > from {
            self.covered.insert(key.clone(), span.all_before);
        }
        for wait in queued {
            if wait.owner == *self.target {
                if !first_hop && self.closes_in(key) {
                    return closes();
                }
            } else {
                self.reach(wait.owner, origin);
            }
        }
        // Shared waits for several keys this shared wait stands behind: it waits for
        // what they wait for, not for their owners (`owner::waits_through_queued`). The
        // target's own are passed over in the new wait's own step, as its other waits
        // there are.
        for wait in multi_key {
            if first_hop && wait.owner == *self.target {
                continue;
            }
            if let Some(cycle) = self.through(graph, &wait, origin) {
                return Some(cycle);
            }
        }
        // The target's own waits here (not linked, or passed over in the first step)
        // that this wait waits for.
        if !first_hop
            && self.closes_in(key)
            && self.target_before(graph, key, span.all_before, span.all_before)
        {
            return closes();
        }
        None
    }

    /// Looks at what the queued wait for several keys `wait` waits for, in each of its
    /// keys, once per search.
    fn through(
        &mut self,
        graph: &mut impl WaitGraph<K>,
        wait: &QueuedWait,
        origin: &K,
    ) -> Option<Cycle<K>> {
        if !self.through.insert(wait.ticket) {
            return None;
        }
        let keys = graph
            .waits_of(&wait.owner)
            .into_iter()
            .find(|each| each.ticket == wait.ticket)
            .map(|each| each.keys)
            .unwrap_or_default();
        for key in &keys {
            let span = QueueSpan::of(graph, key, wait.ticket, wait.mode, None);
            if let Some(cycle) = self.expand(graph, key, &span, origin, false) {
                return Some(cycle);
            }
        }
        None
    }

    fn reach(&mut self, owner: Owner, origin: &K) {
        if self.reached.insert(owner.clone()) {
            self.to_visit.push((origin.clone(), owner));
        }
    }
}
