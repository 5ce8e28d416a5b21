//! Deadlock detection: whether a wait about to begin would wait, through other owners,
//! for its own owner — and so forever. Run when a wait begins, never later.
//!
//! The wait-for graph is one of owners (a session, else a token; `owner`). A wait
//! waits for:
//! - the owners of the holdings of each key it asks for, unless those admit its mode and
//!   nobody it waits for stands before it in that key's queue;
//! - the owners of the waits before it in each key's queue that it waits for
//!   (`owner::waits_for_queued`: all but plain-shared single-key waits, for a plain
//!   shared waiter; all of them otherwise).
//!
//! An owner waits for whatever any of its waits waits for. A new wait whose owner is
//! reachable from what it would wait for is refused. What it would wait for in the very
//! key it asks for under its own owner (another thread of the same session holding
//! that key, or queued for it) is left out: that one is waited out, not refused; only a
//! cycle through another owner is.
//!
//! Why checking when a wait begins is enough: a cycle needs an edge that closes it, and
//! only two things add edges. A new wait adds its own, and is checked here. A grant adds
//! edges *into* the owner it grants to, from the waits still queued for that key: each
//! of them waited for that owner already while it stood ahead of them (a queued wait
//! that others wait for keeps its place until it is granted, so the same owners wait
//! for it as a holder), and the owner's own wait just ended. An acquire granted at once
//! adds none: a key with anyone queued admits nobody new. A release, an expiry or a
//! timeout only removes edges. (The property test below drives random acquires,
//! releases and handoffs and checks that the graph never has a cycle.)
//!
//! Cost: bounded by what the new wait reaches. A key's queue is not walked: the search
//! looks only at the waits that can lead out of it (`linked`: waits for several keys,
//! or of an owner with other waits), since any other wait's owner waits for nothing
//! the queue's holders and earlier waits do not already show; and each key's queue is
//! looked at once per ticket range.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::mode::Mode;
use crate::owner::Owner;
use crate::wait_queue::Ticket;

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

/// What the search reads: the queues (the module reads its registry, a step at a time,
/// never borrowed while it opens a key) and the holders of keys (read from Redis).
pub trait WaitGraph<K> {
    /// The oldest wait in `key`'s queue.
    fn front(&mut self, key: &K) -> Option<Ticket>;
    /// The latest wait before `before` in `key`'s queue that asked for anything but
    /// plain `SHARED`.
    fn last_unshared_before(&mut self, key: &K, before: Ticket) -> Option<Ticket>;
    /// The linked waits of `key`'s queue with tickets in `from..to`.
    fn linked_between(&mut self, key: &K, from: Ticket, to: Ticket) -> Vec<QueuedWait>;
    /// Every wait of `owner`.
    fn waits_of(&mut self, owner: &Owner) -> Vec<OwnerWait<K>>;
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
        target_waits: graph.waits_of(owner),
        reached: HashSet::new(),
        to_visit: Vec::new(),
        covered: HashMap::new(),
        holders_read: HashSet::new(),
    };
    // The new wait waits behind its owner's other waits only as far as it waits for
    // them itself: it is not led through them.
    let own: Vec<Ticket> = search.target_waits.iter().map(|wait| wait.ticket).collect();
    for key in keys {
        let asked = QueueSpan::of(graph, key, ticket, mode, &own);
        if let Some(cycle) = search.expand(graph, key, &asked, key, true) {
            return Some(cycle);
        }
    }
    while let Some((origin, reached)) = search.to_visit.pop() {
        for wait in graph.waits_of(&reached) {
            for key in &wait.keys {
                let span = QueueSpan::of(graph, key, wait.ticket, wait.mode, &[]);
                if let Some(cycle) = search.expand(graph, key, &span, &origin, false) {
                    return Some(cycle);
                }
            }
        }
    }
    None
}

/// What one wait waits for in one key's queue: every wait before `all_before`, and the
/// waits for several keys between that and the wait itself (`bound`).
struct QueueSpan {
    mode: Mode,
    all_before: Ticket,
    bound: Ticket,
    /// Whether anybody it waits for stands before it.
    someone_ahead: bool,
}

impl QueueSpan {
    /// `not_through`: waits whose own waiting the span does not take in.
    fn of<K>(
        graph: &mut impl WaitGraph<K>,
        key: &K,
        bound: Ticket,
        mode: Mode,
        not_through: &[Ticket],
    ) -> Self {
        if mode != Mode::Shared {
            let someone_ahead = graph.front(key).is_some_and(|front| front < bound);
            return QueueSpan {
                mode,
                all_before: bound,
                bound,
                someone_ahead,
            };
        }
        // A plain shared waiter waits behind the latest waiter of another mode, which
        // waits for everyone before it; and for shared waits of several keys after it.
        let latest = graph.last_unshared_before(key, bound);
        let mut behind = latest;
        while let Some(ticket) = behind.filter(|ticket| not_through.contains(ticket)) {
            behind = graph.last_unshared_before(key, ticket);
        }
        QueueSpan {
            mode,
            all_before: behind.map_or(0, |ticket| ticket + 1),
            bound,
            someone_ahead: latest.is_some(),
        }
    }
}

struct Search<'a, K> {
    target: &'a Owner,
    target_waits: Vec<OwnerWait<K>>,
    reached: HashSet<Owner>,
    /// Owners reached and not yet looked at, each with the asked key that led there.
    to_visit: Vec<(K, Owner)>,
    /// Per key, the tickets below which its linked waits were looked at.
    covered: HashMap<K, Ticket>,
    /// Keys whose holders were read in full.
    holders_read: HashSet<K>,
}

impl<K: Clone + Eq + Hash> Search<'_, K> {
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
            .linked_between(key, span.all_before, span.bound)
            .into_iter()
            .filter(|wait| wait.keys > 1)
            .collect();
        let someone_ahead = span.someone_ahead || !multi_key.is_empty();
        if first_hop || !self.holders_read.contains(key) {
            let holders = graph.holders(key, span.mode, someone_ahead);
            if !first_hop && (someone_ahead || !holders.is_empty()) {
                self.holders_read.insert(key.clone());
            }
            for holder in holders {
                if holder == *self.target {
                    if !first_hop {
                        return closes();
                    }
                } else {
                    self.reach(holder, origin);
                }
            }
        }
        let from = match first_hop {
            true => 0,
            false => self.covered.get(key).copied().unwrap_or(0),
        };
        let mut queued = graph.linked_between(key, from, span.all_before);
        if !first_hop && span.all_before > from {
            self.covered.insert(key.clone(), span.all_before);
        }
        queued.extend(multi_key);
        for wait in queued {
            if wait.owner == *self.target {
                if !first_hop {
                    return closes();
                }
            } else {
                self.reach(wait.owner, origin);
            }
        }
        // The target's own waits here that are not linked (its only one, so far).
        let target_here = !first_hop
            && self.target_waits.iter().any(|wait| {
                wait.keys.contains(key)
                    && (wait.ticket < span.all_before
                        || (wait.ticket < span.bound && wait.keys.len() > 1))
            });
        if target_here {
            return closes();
        }
        None
    }

    fn reach(&mut self, owner: Owner, origin: &K) {
        if self.reached.insert(owner.clone()) {
            self.to_visit.push((origin.clone(), owner));
        }
    }
}
