//! Deadlock detection where the waits are: the core's search (`deadlock`) reads the
//! registry a step at a time and the holders of each key it reaches from the keyspace
//! (a key opened for reading, in its own database), never with the registry borrowed
//! while Redis runs.

use fencelock_core::deadlock::{find_cycle, Cycle, EarliestWait, OwnerWait, QueuedWait, WaitGraph};
use fencelock_core::error::deadlock;
use fencelock_core::fifo_queue::Ticket;
use fencelock_core::lock::{self, Admission};
use fencelock_core::mode::Mode;
use fencelock_core::owner::{owners_of, Owner};
use redis_module::{Context, RedisError, RedisString};

use super::{anyone_waiting, with_registry, KeyId, Wanted};
use crate::config;
use crate::ffi::lock_key::LockKey;
use crate::ffi::server::{select_db, selected_db};
use crate::ffi::server_clock;
use crate::keyspace::{lock_events, sessions};
use crate::stats;

/// Whether a wait of the calling client for `names` (in its database), as `wanted`,
/// would close a cycle: the key asked for through which it would, and the key where it
/// closes.
pub(super) fn would_deadlock(
    ctx: &Context,
    names: &[&[u8]],
    wanted: &Wanted,
) -> Option<Cycle<Vec<u8>>> {
    // Nobody waiting: nobody the holders wait for. A waiter with neither session nor
    // token holds nothing anybody could wait for.
    if !config::deadlock_detection() || !anyone_waiting() {
        return None;
    }
    if wanted.session.is_none() && wanted.token.is_none() {
        return None;
    }
    // A session that holds nothing here and waits for nothing yet: no cycle can close
    // at it, however many waits the keys it asks for have (each of them would be
    // walked).
    if let Some(session) = wanted.session.as_deref() {
        let owner = Owner::Session(session.to_vec());
        if !sessions::may_hold(session) && with_registry(|r| !r.has_waits(&owner)) {
            return None;
        }
    }
    let own_db = selected_db(ctx);
    let keys: Vec<KeyId> = names.iter().map(|name| (own_db, name.to_vec())).collect();
    let owner = Owner::of_waiter(wanted.session.as_deref(), wanted.token.as_deref(), 0);
    let ticket = with_registry(|r| r.next_ticket());
    let mut graph = Live {
        ctx,
        selected: own_db,
        max_holders: config::limits().max_holders,
    };
    let cycle = find_cycle(&mut graph, &owner, &keys, wanted.mode, ticket);
    if graph.selected != own_db {
        select_db(ctx, own_db);
    }
    cycle.map(|cycle| Cycle {
        asked: cycle.asked.1,
        closes_at: cycle.closes_at.1,
    })
}

/// The registry and the keyspace, as the search reads them.
struct Live<'a> {
    ctx: &'a Context,
    /// The database selected now (a key of another one is read in its own).
    selected: i32,
    max_holders: usize,
}

impl WaitGraph<KeyId> for Live<'_> {
    fn front(&mut self, key: &KeyId) -> Option<Ticket> {
        with_registry(|r| r.queue_front(key))
    }

    fn last_unshared_before(&mut self, key: &KeyId, before: Ticket) -> Option<Ticket> {
        with_registry(|r| r.last_unshared_before(key, before))
    }

    fn last_exclusive_before(&mut self, key: &KeyId, before: Ticket) -> Option<Ticket> {
        with_registry(|r| r.last_exclusive_before(key, before))
    }

    fn linked_other_than(&mut self, key: &KeyId, owner: &Owner) -> bool {
        with_registry(|r| r.linked_other_than(key, owner))
    }

    fn linked_between(
        &mut self,
        key: &KeyId,
        from: Ticket,
        to: Ticket,
        worth: &dyn Fn(&Owner) -> bool,
    ) -> Vec<QueuedWait> {
        with_registry(|r| r.linked_between(key, from, to, worth))
    }

    fn waits_of(&mut self, owner: &Owner) -> Vec<OwnerWait<KeyId>> {
        with_registry(|r| r.owner_waits(owner))
    }

    fn earliest_waits(&mut self, owner: &Owner) -> Vec<EarliestWait<KeyId>> {
        with_registry(|r| r.earliest_waits(owner))
    }

    fn owns(&mut self, owner: &Owner, ticket: Ticket) -> bool {
        with_registry(|r| r.owns(owner, ticket))
    }

    fn holders(&mut self, key: &KeyId, mode: Mode, even_if_admitted: bool) -> Vec<Owner> {
        let (db, name) = key;
        if *db != self.selected {
            if !select_db(self.ctx, *db) {
                return Vec::new();
            }
            self.selected = *db;
        }
        let name = RedisString::create_from_slice(self.ctx.ctx, name);
        let open = LockKey::open(self.ctx, &name, false);
        let Ok(Some(current)) = open.lock() else {
            return Vec::new();
        };
        let now_ms = server_clock::command_ms();
        let admits = lock::admits(Some(current), mode, self.max_holders, now_ms);
        if admits == Admission::Admit && !even_if_admitted {
            return Vec::new();
        }
        owners_of(current, now_ms)
    }
}

/// Answers a wait that would close `cycle` (`DEADLOCK …`), announced on the key asked
/// for and counted. Nothing was queued or changed.
pub(super) fn refuse(ctx: &Context, cycle: &Cycle<Vec<u8>>) {
    let asked = RedisString::create_from_slice(ctx.ctx, &cycle.asked);
    lock_events::notify(ctx, lock_events::DEADLOCK, &asked);
    stats::DEADLOCKS.bump();
    let error = deadlock(&cycle.asked, &cycle.closes_at);
    ctx.reply(Err(RedisError::String(error)));
}
