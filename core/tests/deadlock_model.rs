//! Deadlock detection against a model: the wait-for graph built the naive way (every
//! wait, every edge, a breadth-first search), over random queues and holdings; and a
//! simulation of acquires, releases and FIFO handoffs with detection on, after every
//! step of which the graph has no cycle (a handoff never creates one).

use std::collections::{HashMap, HashSet, VecDeque};

use fencelock_core::deadlock::{find_cycle, EarliestWait, OwnerWait, QueuedWait, WaitGraph};
use fencelock_core::fifo_queue::Ticket;
use fencelock_core::mode::Mode;
use fencelock_core::owner::{waits_for_queued, waits_through_queued, Owner};
use fencelock_core::wait_registry::{Waiter, Waiters};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct TestWaiter {
    session: Vec<u8>,
    mode: Mode,
}

impl Waiter for TestWaiter {
    fn token(&self) -> Option<&[u8]> {
        None
    }

    fn session(&self) -> Option<&[u8]> {
        Some(&self.session)
    }

    fn mode(&self) -> Mode {
        self.mode
    }
}

type Book = Waiters<u8, u32, TestWaiter, u8>;

/// Who holds a key, and how.
#[derive(Clone, Debug, Default)]
struct Held {
    mode: Option<Mode>,
    owners: Vec<Owner>,
}

impl Held {
    fn admits(&self, mode: Mode) -> bool {
        match self.mode {
            _ if self.owners.is_empty() => true,
            Some(Mode::Semaphore(limit)) => {
                mode == Mode::Semaphore(limit) && self.owners.len() < limit as usize
            }
            Some(Mode::Shared) => mode == Mode::Shared,
            _ => false,
        }
    }

    fn refuses(&self, mode: Mode) -> bool {
        !self.owners.is_empty() && mode.is_shared() && self.mode.is_some_and(|held| held != mode)
    }
}

/// An owner a wait waits for: the queued wait that makes it one (if any), whether it
/// comes through a shared wait for several keys, and the key whose holding or queue it
/// is.
type Dep = (Owner, Option<Ticket>, bool, u8);

/// A wait as the model keeps it, beside the book.
#[derive(Clone, Debug)]
struct ModelWait {
    ticket: Ticket,
    client: u32,
    owner: Owner,
    keys: Vec<u8>,
    mode: Mode,
}

#[derive(Default)]
struct World {
    book: Book,
    waits: Vec<ModelWait>,
    held: HashMap<u8, Held>,
    next_client: u32,
}

impl WaitGraph<u8> for World {
    fn front(&mut self, key: &u8) -> Option<Ticket> {
        self.book.queue_front(key)
    }

    fn last_unshared_before(&mut self, key: &u8, before: Ticket) -> Option<Ticket> {
        self.book.last_unshared_before(key, before)
    }

    fn last_exclusive_before(&mut self, key: &u8, before: Ticket) -> Option<Ticket> {
        self.book.last_exclusive_before(key, before)
    }

    fn linked_other_than(&mut self, key: &u8, owner: &Owner) -> bool {
        self.book.linked_other_than(key, owner)
    }

    fn linked_between(
        &mut self,
        key: &u8,
        from: Ticket,
        to: Ticket,
        worth: &dyn Fn(&Owner) -> bool,
    ) -> Vec<QueuedWait> {
        self.book.linked_between(key, from, to, worth)
    }

    fn waits_of(&mut self, owner: &Owner) -> Vec<OwnerWait<u8>> {
        self.book.owner_waits(owner)
    }

    fn earliest_waits(&mut self, owner: &Owner) -> Vec<EarliestWait<u8>> {
        self.book.earliest_waits(owner)
    }

    fn owns(&mut self, owner: &Owner, ticket: Ticket) -> bool {
        self.book.owns(owner, ticket)
    }

    fn holders(&mut self, key: &u8, mode: Mode, even_if_admitted: bool) -> Vec<Owner> {
        let held = self.held.get(key).cloned().unwrap_or_default();
        if held.admits(mode) && !even_if_admitted {
            return Vec::new();
        }
        held.owners
    }
}

fn session(owner: u8) -> Owner {
    Owner::Session(vec![b'a' + owner])
}

impl World {
    fn enqueue(&mut self, owner: u8, keys: Vec<u8>, mode: Mode) -> Ticket {
        let client = self.next_client;
        self.next_client += 1;
        let waiter = TestWaiter {
            session: vec![b'a' + owner],
            mode,
        };
        let ticket = self.book.enqueue_all(keys.clone(), client, waiter);
        self.waits.push(ModelWait {
            ticket,
            client,
            owner: session(owner),
            keys,
            mode,
        });
        ticket
    }

    fn hold(&mut self, key: u8, owner: Owner, mode: Mode) {
        let held = self.held.entry(key).or_default();
        held.mode = Some(mode);
        held.owners.push(owner);
    }

    /// The owners a wait (queued under `ticket`, or about to be) waits for in `key`,
    /// each with the queued wait that makes it one (if any), whether it comes through
    /// a shared wait for several keys queued before (whose own dependencies a shared
    /// wait takes on; those of `skip_through`'s waits are left out), and the key whose
    /// holding or queue it is.
    fn deps_of(
        &self,
        key: u8,
        ticket: Ticket,
        mode: Mode,
        skip_through: Option<&Owner>,
    ) -> Vec<Dep> {
        let queued: Vec<&ModelWait> = self
            .waits
            .iter()
            .filter(|w| w.keys.contains(&key) && w.ticket < ticket)
            .filter(|w| waits_for_queued(mode, w.mode, w.keys.len()))
            .collect();
        // The latest waits before it (other than the first step's owner's) that a
        // shared wait for several keys is not granted past in the same step (an
        // exclusive one), and that waits for everyone before it (any but plain shared).
        let latest = |which: &dyn Fn(Mode) -> bool| {
            queued
                .iter()
                .filter(|w| which(w.mode) && skip_through != Some(&w.owner))
                .map(|w| w.ticket)
                .max()
        };
        let exclusive = latest(&|mode| mode == Mode::Exclusive);
        let unshared = latest(&|mode| mode != Mode::Shared);
        let held = self.held.get(&key).cloned().unwrap_or_default();
        let mut deps: Vec<Dep> = Vec::new();
        if !held.admits(mode) || !queued.is_empty() {
            deps.extend(held.owners.into_iter().map(|o| (o, None, false, key)));
        }
        for w in queued {
            if waits_through_queued(mode, w.mode, w.keys.len()) {
                if skip_through == Some(&w.owner) {
                    continue;
                }
                // Behind a waiter of another mode, which waits for its owner.
                if unshared.is_some_and(|unshared| w.ticket < unshared) {
                    deps.push((w.owner.clone(), Some(w.ticket), false, key));
                }
                if exclusive.is_some_and(|exclusive| w.ticket < exclusive) {
                    continue;
                }
                for other in &w.keys {
                    let through = self.deps_of(*other, w.ticket, w.mode, None);
                    deps.extend(through.into_iter().map(|(o, t, _, k)| (o, t, true, k)));
                }
            } else {
                deps.push((w.owner.clone(), Some(w.ticket), false, key));
            }
        }
        deps
    }

    /// Who each owner waits for, each with the key whose holding or queue it is.
    fn edges(&self) -> HashMap<Owner, HashSet<(Owner, u8)>> {
        let mut edges: HashMap<Owner, HashSet<(Owner, u8)>> = HashMap::new();
        for wait in &self.waits {
            for key in &wait.keys {
                for (dep, _, _, at) in self.deps_of(*key, wait.ticket, wait.mode, None) {
                    if dep != wait.owner {
                        edges
                            .entry(wait.owner.clone())
                            .or_default()
                            .insert((dep, at));
                    }
                }
            }
        }
        edges
    }

    /// The naive answer: would a new wait of `owner` reach `owner`? Reaching it in a
    /// key the new wait asks for (its holding or its wait there, directly or through
    /// other owners) is the new wait's own dependency on another thread of its owner,
    /// waited out; only reaching it in another key closes a cycle. Its first step also
    /// looks behind the waits in its keys whose owner waits for nothing else (those
    /// lead back into that key alone, and are followed only within it).
    fn naive_deadlock(&self, owner: &Owner, keys: &[u8], mode: Mode) -> bool {
        let edges = self.edges();
        let waits_of = |o: &Owner| self.waits.iter().filter(|w| w.owner == *o).count();
        let mut frontier: VecDeque<Owner> = VecDeque::new();
        for key in keys {
            let mut within: Vec<(Ticket, Mode)> = vec![(Ticket::MAX, mode)];
            let mut done: HashSet<Ticket> = HashSet::new();
            while let Some((bound, mode)) = within.pop() {
                for (dep, queued, through, at) in self.deps_of(*key, bound, mode, Some(owner)) {
                    // Through another owner's wait for several keys, its own holdings
                    // and waits in other keys are a cycle.
                    if through {
                        if dep == *owner {
                            if !keys.contains(&at) {
                                return true;
                            }
                            continue;
                        }
                        frontier.push_back(dep);
                        continue;
                    }
                    if dep == *owner {
                        continue;
                    }
                    let only_here = queued.filter(|_| waits_of(&dep) == 1).and_then(|ticket| {
                        self.waits
                            .iter()
                            .find(|w| w.ticket == ticket && w.keys.len() == 1)
                    });
                    match only_here {
                        Some(wait) => {
                            if done.insert(wait.ticket) {
                                within.push((wait.ticket, wait.mode));
                            }
                        }
                        None => frontier.push_back(dep),
                    }
                }
            }
        }
        let mut seen: HashSet<Owner> = frontier.iter().cloned().collect();
        while let Some(next) = frontier.pop_front() {
            for (dep, at) in edges.get(&next).into_iter().flatten() {
                if dep == owner {
                    if !keys.contains(at) {
                        return true;
                    }
                    continue;
                }
                if seen.insert(dep.clone()) {
                    frontier.push_back(dep.clone());
                }
            }
        }
        false
    }

    fn has_cycle(&self) -> bool {
        let edges = self.edges();
        let owners: Vec<Owner> = edges.keys().cloned().collect();
        owners.iter().any(|start| {
            let mut seen = HashSet::new();
            let mut stack: Vec<&Owner> = edges
                .get(start)
                .into_iter()
                .flatten()
                .map(|(o, _)| o)
                .collect();
            while let Some(next) = stack.pop() {
                if next == start {
                    return true;
                }
                if seen.insert(next.clone()) {
                    stack.extend(edges.get(next).into_iter().flatten().map(|(o, _)| o));
                }
            }
            false
        })
    }

    fn detect(&mut self, owner: u8, keys: &[u8], mode: Mode) -> bool {
        let ticket = self.book.next_ticket();
        find_cycle(self, &session(owner), keys, mode, ticket).is_some()
    }

    /// Hands every free key to the first wait of its queue while that wait is first in
    /// all its queues and all its keys admit it (a refused mode leaves the queue).
    fn settle(&mut self) {
        loop {
            let mut changed = false;
            for key in 0..KEYS {
                let Some(head) = self.book.head(&key) else {
                    continue;
                };
                let (ticket, keys, mode) = (head.ticket, head.keys.to_vec(), head.waiter.mode);
                if self.book.not_first_at(ticket).is_some() {
                    continue;
                }
                let held = |key: &u8| self.held.get(key).cloned().unwrap_or_default();
                let refused = keys.iter().any(|key| held(key).refuses(mode));
                if !refused && !keys.iter().all(|key| held(key).admits(mode)) {
                    continue;
                }
                let taken = self.book.take_ticket(ticket);
                let wait = self.waits.iter().position(|w| w.ticket == ticket);
                let (Some(_), Some(wait)) = (taken, wait) else {
                    panic!("the book and the model disagree on wait {ticket}");
                };
                let wait = self.waits.remove(wait);
                if !refused {
                    for key in wait.keys {
                        self.hold(key, wait.owner.clone(), mode);
                    }
                }
                changed = true;
            }
            if !changed {
                return;
            }
        }
    }
}

const KEYS: u8 = 5;
const OWNERS: u8 = 6;

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Exclusive),
        Just(Mode::Shared),
        Just(Mode::Semaphore(2))
    ]
}

fn keys() -> impl Strategy<Value = Vec<u8>> {
    proptest::sample::subsequence((0..KEYS).collect::<Vec<u8>>(), 1..=3).prop_shuffle()
}

#[derive(Clone, Debug)]
enum Step {
    Hold(u8, u8, Mode),
    Wait(u8, Vec<u8>, Mode),
    Leave(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..KEYS, 0..OWNERS, mode()).prop_map(|(k, o, m)| Step::Hold(k, o, m)),
        (0..OWNERS, keys(), mode()).prop_map(|(o, k, m)| Step::Wait(o, k, m)),
        (0..64usize).prop_map(Step::Leave),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// Over random holdings and queues (owners may wait several times, as threads of
    /// one session do), the search answers exactly what the naive graph does.
    #[test]
    fn the_search_answers_as_the_naive_graph_does(
        steps in proptest::collection::vec(step(), 0..24),
        asker in 0..OWNERS,
        asked in keys(),
        asked_mode in mode(),
    ) {
        let mut world = World::default();
        for step in steps {
            match step {
                Step::Hold(key, owner, mode) => {
                    let held = world.held.get(&key).cloned().unwrap_or_default();
                    if held.admits(mode) {
                        world.hold(key, session(owner), mode);
                    }
                }
                Step::Wait(owner, keys, mode) => {
                    world.enqueue(owner, keys, mode);
                }
                Step::Leave(index) => {
                    if !world.waits.is_empty() {
                        let wait = world.waits.remove(index % world.waits.len());
                        prop_assert!(world.book.take(wait.client, Some(wait.ticket)).is_some());
                    }
                }
            }
        }
        let expected = world.naive_deadlock(&session(asker), &asked, asked_mode);
        prop_assert_eq!(world.detect(asker, &asked, asked_mode), expected);
    }

    /// Owners that block while they wait (one wait each at most) acquire, wait and
    /// release at random; handoffs follow FIFO; every wait that would close a cycle is
    /// refused. After every step the wait-for graph has no cycle.
    #[test]
    fn with_detection_on_the_graph_never_has_a_cycle(
        steps in proptest::collection::vec((0..OWNERS, keys(), mode(), any::<bool>()), 1..60),
    ) {
        let mut world = World::default();
        for (owner, keys, mode, release) in steps {
            let me = session(owner);
            if world.waits.iter().any(|w| w.owner == me) {
                continue;
            }
            if release {
                for held in world.held.values_mut() {
                    held.owners.retain(|o| *o != me);
                }
            } else if keys.iter().all(|k| world.held.get(k).is_none_or(|h| !h.owners.contains(&me)))
                && !keys.iter().any(|k| world.held.get(k).is_some_and(|h| h.refuses(mode)))
            {
                let free = keys.iter().all(|k| {
                    world.book.count(k) == 0
                        && world.held.get(k).is_none_or(|h| h.admits(mode))
                });
                if free {
                    for key in keys {
                        world.hold(key, me.clone(), mode);
                    }
                } else {
                    let refused = world.detect(owner, &keys, mode);
                    prop_assert_eq!(refused, world.naive_deadlock(&me, &keys, mode));
                    if !refused {
                        world.enqueue(owner, keys, mode);
                    }
                }
            }
            world.settle();
            prop_assert!(!world.has_cycle(), "a cycle among {:?}", world.waits);
        }
    }
}

#[test]
fn two_owners_each_holding_what_the_other_asks_for() {
    let mut world = World::default();
    world.hold(0, session(0), Mode::Exclusive);
    world.hold(1, session(1), Mode::Exclusive);
    assert!(!world.detect(0, &[1], Mode::Exclusive));
    world.enqueue(0, vec![1], Mode::Exclusive);
    let ticket = world.book.next_ticket();
    let cycle = find_cycle(&mut world, &session(1), &[0], Mode::Exclusive, ticket);
    assert_eq!(cycle.map(|c| (c.asked, c.closes_at)), Some((0, 1)));
}

#[test]
fn a_session_waiting_for_a_key_it_holds_itself_waits() {
    let mut world = World::default();
    world.hold(0, session(0), Mode::Exclusive);
    world.enqueue(1, vec![0], Mode::Exclusive);
    assert!(!world.detect(0, &[0], Mode::Exclusive));
}

#[test]
fn a_long_chain_without_a_cycle_waits_and_closing_it_is_refused() {
    let mut world = World::default();
    for owner in 0..KEYS {
        world.hold(owner, session(owner), Mode::Exclusive);
    }
    for owner in 0..KEYS - 1 {
        world.enqueue(owner, vec![owner + 1], Mode::Exclusive);
    }
    assert!(!world.detect(KEYS, &[0], Mode::Exclusive));
    assert!(world.detect(KEYS - 1, &[0], Mode::Exclusive));
}

#[test]
fn a_shared_waiter_behind_a_shared_wait_for_several_keys_waits_for_what_that_wait_does() {
    // Keys: 0 = k (held by H = 0), 1 = z (held by OS = 1), 2 = free1.
    let mut world = World::default();
    world.hold(0, session(0), Mode::Exclusive);
    world.hold(1, session(1), Mode::Exclusive);
    world.enqueue(2, vec![0, 2], Mode::Shared);
    assert!(!world.detect(1, &[0], Mode::Shared));
    world.enqueue(1, vec![0], Mode::Shared);
    // OM (2) waits for z: OS waits only for H (and free1, free), never for OM.
    assert!(!world.detect(2, &[1], Mode::Exclusive));
    assert!(!world.naive_deadlock(&session(2), &[1], Mode::Exclusive));
    // When free1 is held by whoever asks for z, OS waits for it through OM's wait.
    world.hold(2, session(3), Mode::Exclusive);
    assert!(world.detect(3, &[1], Mode::Exclusive));
    assert!(world.naive_deadlock(&session(3), &[1], Mode::Exclusive));
}

#[test]
fn threads_of_one_session_wait_behind_another_session_with_several_waits_for_that_key() {
    // Keys: 0 = X, held by A (0); B (1) waits for X twice; then A asks for X again.
    let mut world = World::default();
    world.hold(0, session(0), Mode::Exclusive);
    world.enqueue(1, vec![0], Mode::Exclusive);
    assert!(!world.detect(0, &[0], Mode::Exclusive));
    world.enqueue(1, vec![0], Mode::Exclusive);
    assert!(!world.naive_deadlock(&session(0), &[0], Mode::Exclusive));
    assert!(!world.detect(0, &[0], Mode::Exclusive));
    // Three owners: C (2) queued for X twice as well; shared and semaphore modes.
    world.enqueue(2, vec![0], Mode::Exclusive);
    world.enqueue(2, vec![0], Mode::Exclusive);
    for mode in [Mode::Exclusive, Mode::Shared, Mode::Semaphore(2)] {
        assert!(!world.naive_deadlock(&session(0), &[0], mode));
        assert!(!world.detect(0, &[0], mode));
    }
    // B waits for X and Z (1) together; Z is free: still only X leads back to A.
    world.enqueue(1, vec![0, 1], Mode::Exclusive);
    assert!(!world.naive_deadlock(&session(0), &[0], Mode::Exclusive));
    assert!(!world.detect(0, &[0], Mode::Exclusive));
    // Once A holds Z, B waits for A in another key: a cycle, refused.
    world.hold(1, session(0), Mode::Exclusive);
    assert!(world.naive_deadlock(&session(0), &[0], Mode::Exclusive));
    assert!(world.detect(0, &[0], Mode::Exclusive));
}

#[test]
fn a_shared_wait_behind_another_sessions_shared_wait_for_several_keys_waits_out_its_own_key() {
    // Keys: 0 = X, held by A (0) alone; B (1) waits shared for X and Y (1, free).
    let mut world = World::default();
    world.hold(0, session(0), Mode::Exclusive);
    world.enqueue(1, vec![0, 1], Mode::Shared);
    assert!(!world.naive_deadlock(&session(0), &[0], Mode::Shared));
    assert!(!world.detect(0, &[0], Mode::Shared));
    // Y held by A too: B's wait waits for A in Y, another key.
    world.hold(1, session(0), Mode::Exclusive);
    assert!(world.naive_deadlock(&session(0), &[0], Mode::Shared));
    assert!(world.detect(0, &[0], Mode::Shared));
}

#[test]
fn a_shared_waiter_waits_through_a_shared_wait_for_several_keys_past_a_semaphore_waiter() {
    // B (1) waits for key 1 (LIMIT 2), then shared for 1 and 4 together. C (2) waits for
    // 4, then shared for 4 behind B's wait. B asks for 4 exclusively. C's shared wait is
    // granted in the same step as B's wait for 1 and 4 (its own semaphore wait between
    // them is refused once they hold 4), so it waits for what B's waits for in 1: B's
    // semaphore wait, in another key than 4. With an exclusive waiter between them it
    // waits for B's wait to end instead: B's own wait in 4, waited out.
    for (between, cycle) in [
        (None, true),
        (Some(Mode::Semaphore(2)), true),
        (Some(Mode::Exclusive), false),
    ] {
        let mut world = World::default();
        world.enqueue(1, vec![1], Mode::Semaphore(2));
        world.enqueue(1, vec![1, 4], Mode::Shared);
        world.hold(0, session(2), Mode::Exclusive);
        world.enqueue(2, vec![3], Mode::Exclusive);
        if let Some(mode) = between {
            world.enqueue(2, vec![4], mode);
        }
        world.enqueue(2, vec![4], Mode::Shared);
        assert_eq!(
            world.naive_deadlock(&session(1), &[4], Mode::Exclusive),
            cycle,
            "{between:?}"
        );
        assert_eq!(world.detect(1, &[4], Mode::Exclusive), cycle, "{between:?}");
    }
}
