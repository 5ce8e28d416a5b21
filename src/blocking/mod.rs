//! Server-side waiting for `LOCK.ACQUIRE … BLOCK` and `LOCK.ACQUIREALL … BLOCK`: FIFO
//! queues of blocked clients per key, in one arrival order across keys (kept in the
//! core's `Waiters`), and the handoff that makes the first waiter the holder in the
//! same step as the release, expiry or deletion that freed the lock (a wait for several
//! keys takes its turn in `multi_key_turn`). A command that finds what it asked for
//! busy makes one call, `wait` (or `wait_for_change`, an observer's), which decides
//! whether it waits and checks a wait about to begin for a deadlock (`deadlocks`);
//! the request is one type from parse to grant (`Wanted`).
//!
//! Waiters live only in module memory (not persisted, not replicated). Each is a Redis
//! blocked client; exactly one of these ends it:
//! - a handoff: we unblock it with the grant, the reply callback sends
//!   `[token, fence]`; if the client is gone before that, freeing the grant sees it
//!   undelivered and releases the lock to the next waiter;
//! - its BLOCK timeout, on a timer of ours (`block_timeouts`): we unblock it with
//!   nothing, and the reply callback answers nil;
//! - `CLIENT UNBLOCK id` (Redis's timeout callback answers nil);
//! - a disconnect or `CLIENT UNBLOCK id ERROR` (the disconnect callback).
//!
//! Between a handoff and its reply the client is still blocked as far as Redis knows;
//! `CLIENT UNBLOCK` in that window would make Redis 7.0 drop the grant unanswered, so the
//! command filter turns it into a no-op for such clients (`reply_pending`). Inside
//! `MULTI` (where the filter sees commands only as they are queued) or a script, a
//! handoff waits for the end of the transaction or script instead.
//!
//! Redis runs all of these on its main thread. The registry is never borrowed across a
//! call into Redis that could re-enter it (key writes raise keyspace events).

mod block_timeouts;
mod callbacks;
mod deadlocks;
mod holder_leases;
mod multi_key_turn;
mod once_waits;
mod timers;
mod wait;
mod wanted;

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use fencelock_core::error::CommandError;
use fencelock_core::lock::{self, Admission};
use fencelock_core::mode::Mode;
use fencelock_core::token::Generated;
use fencelock_core::wait_registry::{self, Taken, Waiters};
use redis_module::{Context, RedisString};

use crate::config;
use crate::durations;
use crate::ffi::blocked::{self, BlockedClient};
use crate::ffi::lock_key::LockKey;
use crate::ffi::main_thread::MainThread;
use crate::ffi::server::{client_id, in_multi_or_script, selected_db};
use crate::ffi::server_clock;
use crate::ffi::timers::TimerId;
use crate::flagged::{Flagged, Occupied};
use crate::keyspace::effects::{self, Change};
use crate::keyspace::lock_events;
use crate::node_fence;
use crate::observing;
use crate::stats;
use block_timeouts::BlockTimeout;
use callbacks::{Delivery, LockWaiting};
use timers::{arm_expiry_check, stop_abandoned_checks};

pub use holder_leases::{follow_anew, follow_loaded};
pub use once_waits::{answer_done, OnceWanted};
pub use timers::{key_announced, key_changed, settle_all_queues};
use timers::{lease_changed, settle_changed};
pub use wait::{wait, wait_for_change};
pub use wanted::Wanted;

/// A lock key within one logical database.
pub(crate) type KeyId = (i32, Vec<u8>);

/// One blocked `LOCK.ACQUIRE`.
struct Waiter {
    /// The blocked connection's `CLIENT ID`.
    client_id: u64,
    wanted: Wanted<'static>,
    /// The timer that ends the wait (`BLOCK` timeout), unless it waits forever.
    timeout_timer: Option<TimerId>,
    /// Of a wait for several keys, the position of the key that kept it waiting at its
    /// last turn: every key before it was the wait's to take then, so the next turn
    /// looks from there on (`multi_key_turn::take_turn`).
    blocked_on: Option<usize>,
    /// When it began, on the fence clock's time base (server µs): its length is
    /// recorded when it ends (`wait_over`), and `LOCK.TOP` shows the longest.
    since_us: u64,
}

impl wait_registry::Waiter for Waiter {
    fn token(&self) -> Option<&[u8]> {
        self.wanted.token.as_deref()
    }

    fn session(&self) -> Option<&[u8]> {
        self.wanted.session.as_deref()
    }

    fn mode(&self) -> Mode {
        self.wanted.mode
    }
}

type Registry = Waiters<KeyId, BlockedClient, Waiter, TimerId>;

static REGISTRY: MainThread<RefCell<Registry>> =
    MainThread::new(|| RefCell::new(Registry::default()));

/// Whether the registry had a waiter when it was last changed (see `flagged`).
static ANYONE_WAITING: AtomicBool = AtomicBool::new(false);

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    REGISTRY.with(|registry| f(&mut Flagged::new(registry.borrow_mut(), &ANYONE_WAITING)))
}

impl Occupied for Registry {
    fn occupied(&self) -> bool {
        !self.is_empty()
    }
}

/// Number of clients waiting for `key` in the selected database.
fn waiter_count(ctx: &Context, name: &[u8]) -> usize {
    let id = (selected_db(ctx), name.to_vec());
    with_registry(|r| r.count(&id))
}

/// Clients waiting for `key` in the selected database: (exclusive, shared).
pub fn waiter_counts(ctx: &Context, name: &[u8]) -> (usize, usize) {
    let id = (selected_db(ctx), name.to_vec());
    with_registry(|r| {
        let shared = r.count_shared(&id);
        (r.count(&id).saturating_sub(shared), shared)
    })
}

/// Runs an acquire (`LOCK.ACQUIRE`, `LOCK.ACQUIREALL`, `LOCK.ONCE`) that asked to
/// `BLOCK` if `blocks`: one that did not join a queue (granted at once, refused, or
/// answered nil where it may not block) is a wait of 0 µs, so that every acquire with
/// `BLOCK` is one wait in the distribution, as its client measures it.
/// A wait that joins a queue begins when its command began (`WAIT_BEGAN`), as near as
/// the module sees to when its client sent it.
pub fn counting_wait<T>(blocks: bool, acquire: impl FnOnce() -> T) -> T {
    if !blocks {
        return acquire();
    }
    WAIT_BEGAN.with(|began| began.set(server_clock::now_micros()));
    let before = with_registry(|r| r.next_ticket());
    let answered = acquire();
    WAIT_BEGAN.with(|began| began.set(0));
    if with_registry(|r| r.next_ticket()) == before {
        durations::wait_ended(0);
    }
    answered
}

/// When the running acquire with `BLOCK` began (server µs), 0 outside one.
static WAIT_BEGAN: MainThread<std::cell::Cell<u64>> = MainThread::new(|| std::cell::Cell::new(0));

/// When a wait joining a queue now began: its command's start, if known.
fn wait_began() -> u64 {
    match WAIT_BEGAN.with(std::cell::Cell::get) {
        0 => server_clock::now_micros(),
        began => began,
    }
}

/// Whether any client waits for any key: the fast path of every release and acquire.
pub fn anyone_waiting() -> bool {
    ANYONE_WAITING.load(Relaxed)
}

/// Whether any client waits for `name` in the selected database (a new acquire queues
/// behind them).
pub fn is_queued(ctx: &Context, name: &[u8]) -> bool {
    anyone_waiting() && waiter_count(ctx, name) > 0
}

/// Every key some client waits for, as (db, name) (a slot migration looks for those of
/// the slots it moved).
pub fn waited_keys() -> Vec<(i32, Vec<u8>)> {
    if !anyone_waiting() {
        return Vec::new();
    }
    with_registry(|r| r.keys_where(|_| true))
}

/// The keys of database `db` somebody waits for: each name, how many wait, and when
/// the first of them began (server µs). For `LOCK.TOP`: as many entries as keys
/// waited for, never a walk of the keyspace.
pub fn queued_keys(db: i32) -> Vec<(Vec<u8>, usize, u64)> {
    if !anyone_waiting() {
        return Vec::new();
    }
    with_registry(|r| {
        r.keys()
            .into_iter()
            .filter(|(key_db, _)| *key_db == db)
            .filter_map(|id| {
                let since_us = r.head(&id)?.waiter.since_us;
                let waiting = r.count(&id);
                Some((id.1, waiting, since_us))
            })
            .collect()
    })
}

/// Clients waiting across all keys.
pub fn total_waiters() -> usize {
    with_registry(|r| r.total())
}

/// Whether the clients waiting for `key` in the selected database, acquires and
/// observers (`LOCK.OBSERVE`) together, would be above `limit` after one more.
fn queue_is_full(ctx: &Context, name: &[u8], limit: usize) -> bool {
    waiter_count(ctx, name) + observing::count(selected_db(ctx), name) >= limit
}

/// Blocks the calling client in the queue of each of `keys` (distinct, each with when
/// its lock next changes by itself, a lease's end, if ever), as one wait. The caller
/// replies nothing more.
fn enqueue_all(
    ctx: &Context,
    keys: Vec<(Vec<u8>, Option<i64>)>,
    wanted: Wanted<'static>,
    timeout_ms: i64,
) -> bool {
    let client_id = client_id(ctx);
    let Some(client) = blocked::block::<LockWaiting>(ctx) else {
        return false;
    };
    let db = selected_db(ctx);
    let ids: Vec<KeyId> = keys.iter().map(|(name, _)| (db, name.clone())).collect();
    let waiter = Waiter {
        client_id,
        wanted,
        timeout_timer: None,
        blocked_on: None,
        since_us: wait_began(),
    };
    let ticket = with_registry(|r| r.enqueue_all(ids.clone(), client, waiter));
    if timeout_ms > 0 {
        let ends_at_ms = server_clock::now_ms().saturating_add(timeout_ms);
        block_timeouts::arm(ctx, BlockTimeout::new(client, ticket, ends_at_ms));
    }
    for (id, (_, next_change_ms)) in ids.iter().zip(keys) {
        if let Some(at) = next_change_ms {
            arm_expiry_check(ctx, id, at);
        }
    }
    true
}

/// What follows a write to the lock open as `key` (see `effects::Change`): the room a
/// holder left goes to the queue, a moved lease re-times the queue's handoff, a shared
/// holder's own lease end is followed, and an effect form settles the queue on the
/// next turn. The one place a write's follow-ups are decided.
pub fn after(ctx: &Context, key: &mut LockKey, change: Change) {
    match change {
        Change::Granted(mode) => {
            if mode.is_shared() {
                holder_leases::watch(ctx, key);
            }
        }
        Change::Extended => {
            lease_changed(ctx, key);
            holder_leases::watch(ctx, key);
        }
        Change::Released => {
            hand_off(ctx, key);
        }
        Change::Dropped => key_changed(ctx, selected_db(ctx), key.name().as_slice()),
        Change::Applied(mode) => {
            // Waiters for this name (on a primary) follow the new holding's deadline;
            // a shared holder's own lease end is followed from here (AOF replay, a
            // replica that may be promoted, a lock restored by hand).
            key_changed(ctx, selected_db(ctx), key.name().as_slice());
            if mode.is_shared() {
                holder_leases::watch(ctx, key);
            }
        }
    }
}

/// A key that holds a done record it did not get from `LOCK.DONE` (`RESTORE`,
/// `RENAME`, `SWAPDB`, `LOCK.RECORD` put it there): its waiting duplicates are answered
/// with the result, as `LOCK.DONE` answers them; plain acquires go on waiting.
fn answer_done_record(ctx: &Context, key: &LockKey) {
    let Some(record) = key.once().filter(|record| record.is_done()) else {
        return;
    };
    let (fence, fingerprint) = (record.fence(), record.fingerprint().map(<[u8]>::to_vec));
    let result = record.result().unwrap_or_default().to_vec();
    answer_done(ctx, key, fence, fingerprint.as_deref(), &result);
}

/// Called with the key open for writing (and its ended shared holders dropped): while
/// the lock admits the first waiter, that waiter becomes a holder now: one exclusive
/// waiter, or every consecutive shared waiter that fits. A first waiter whose mode the
/// holders refuse is answered `WRONGMODE`. Returns whether anyone was handed the lock.
pub fn hand_off(ctx: &Context, key: &mut LockKey) -> bool {
    if !anyone_waiting() {
        return false;
    }
    let name = key.name();
    let id: KeyId = (selected_db(ctx), name.as_slice().to_vec());
    if has_waiters(&id) && in_multi_or_script(ctx) {
        // After the transaction or script instead: a `CLIENT UNBLOCK` queued in it would
        // otherwise meet a waiter granted but not yet answered, which the command filter
        // cannot spare on Redis 7.0 (it sees queued commands only when they are queued),
        // and the waiter would never be answered; and a later command of the same step
        // (a `LOCK.CLOSE` of the waiter's session, a release by its token) would take
        // the grant away before its reply is sent. Until then the lock is free with a
        // queue, which every new acquire finds busy.
        key_changed(ctx, id.0, &id.1);
        return false;
    }
    answer_done_record(ctx, key);
    let max_holders = config::limits().max_holders;
    let mut handed = false;
    while let Some((ticket, mode, keys, token)) = with_registry(|r| {
        r.head(&id).map(|head| {
            let wanted = &head.waiter.wanted;
            (
                head.ticket,
                wanted.mode,
                head.keys.len(),
                wanted.token.clone(),
            )
        })
    }) {
        if keys > 1 {
            // A wait for several keys: granted all of them at once, or it keeps its
            // place at the head of this queue.
            match multi_key_turn::take_turn(ctx, key, &id, ticket) {
                multi_key_turn::Turn::Granted => handed = true,
                multi_key_turn::Turn::Refused => {}
                multi_key_turn::Turn::Waits => break,
            }
            continue;
        }
        let admission = key.lock().map_or(Admission::Busy, |current| {
            let token = token.as_deref();
            lock::admits_waiter(current, token, mode, max_holders, server_clock::now_ms())
        });
        match admission {
            Admission::Admit => handed |= grant_first(ctx, key, &id),
            Admission::WrongMode(held) => refuse_first(ctx, &id, name, held),
            Admission::Busy => break,
        }
    }
    stop_abandoned_checks(ctx);
    if has_waiters(&id) {
        if let Some(at) = effects::next_lease_end(key, server_clock::now_ms()) {
            arm_expiry_check(ctx, &id, at);
        }
    }
    if handed {
        holder_leases::watch(ctx, key);
    }
    handed
}

/// Makes the first waiter of `id` a holder and unblocks it with the grant (or with nil
/// when the grant cannot be made). Returns whether it was granted.
fn grant_first(ctx: &Context, key: &mut LockKey, id: &KeyId) -> bool {
    let name = key.name();
    let Some(Taken { client, waiter, .. }) = with_registry(|r| r.pop_first(id)) else {
        return false;
    };
    // One clock read for the wait's end and the grant's fence.
    let now_us = server_clock::now_micros();
    wait_over_at(ctx, &waiter, now_us);
    let wanted = waiter.wanted;
    let Wanted {
        ttl_ms,
        mode,
        all_keys,
        ..
    } = wanted;
    let token = wanted.token.clone().map(Cow::into_owned);
    let chosen_token = token.is_some();
    // The waiter's reply is sent later, so the token is kept as its hex spelling.
    let generated = (!chosen_token).then(Generated::fresh);
    let token = token
        .or_else(|| generated.map(|generated| generated.hex().to_vec()))
        .unwrap_or_default();
    let issued = node_fence::with_clock(|clock| lock::issue(clock, now_us));
    let lock::Acquire::Granted { fence } = issued else {
        // No fence left to issue: answer nil rather than leave the waiter blocked.
        blocked::unblock::<LockWaiting>(client, None);
        return false;
    };
    let deadline_ms =
        lock::waiter_deadline(server_clock::now_ms(), ttl_ms, config::limits().max_ttl_ms);
    let granted = match &wanted.once {
        Some(once) => once_waits::run(ctx, key, once, &wanted, (&token, generated.as_ref()), fence),
        None => {
            let new = effects::NewHolder {
                token: &token,
                fence,
                deadline_ms,
                mode,
                generated: generated.as_ref(),
                extras: wanted.extras(),
                now_us,
            };
            effects::grant(ctx, key, &new).map(|_| ())
        }
    };
    if granted.is_err() {
        // The key could not take the grant: the waiter is answered nil rather than left
        // blocked on a lock it does not hold.
        blocked::unblock::<LockWaiting>(client, None);
        return false;
    }
    lock_events::notify(ctx, lock_events::HANDOFF, name);
    stats::HANDOFFS.bump();
    // Same-token waits first: they renew the lease the grant below is sent with.
    if chosen_token {
        answer_same_token(
            ctx,
            key,
            id,
            &token,
            fence,
            (mode, wanted.session.as_deref()),
        );
    }
    with_registry(|r| r.reply_pending(waiter.client_id));
    let delivery = Delivery::Granted {
        client_id: waiter.client_id,
        key: id.clone(),
        token,
        fence,
        delivered: false,
        as_list: all_keys,
    };
    blocked::unblock::<LockWaiting>(client, Some(delivery));
    true
}

/// The first waiter of `id` asked for a mode the holders refuse: it gets `WRONGMODE`.
fn refuse_first(ctx: &Context, id: &KeyId, name: &RedisString, held: Mode) {
    let Some(Taken { client, waiter, .. }) = with_registry(|r| r.pop_first(id)) else {
        return;
    };
    wait_over(ctx, &waiter);
    let refusal = CommandError::WrongMode(held).message_for_key(name.as_slice());
    blocked::unblock::<LockWaiting>(client, Some(Delivery::Refused(refusal.into_owned())));
}

/// Other waiters that asked with the token just granted are the same client again (a
/// retry on a new connection): each in the same mode and session gets the same grant,
/// as a same-token acquire would, and its lease restarts; one in another mode or
/// session is refused, as a same-token acquire would be.
pub(super) fn answer_same_token(
    ctx: &Context,
    key: &mut LockKey,
    id: &KeyId,
    token: &[u8],
    fence: u64,
    (mode, session): (Mode, Option<&[u8]>),
) {
    let name = key.name();
    for Taken { client, waiter, .. } in with_registry(|r| r.take_same_token(id, token)) {
        wait_over(ctx, &waiter);
        let refusal = if waiter.wanted.mode != mode {
            Some(CommandError::WrongMode(mode))
        } else if waiter.wanted.session.as_deref() != session {
            Some(CommandError::WrongSession)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            let refusal = refusal.message_for_key(name.as_slice());
            blocked::unblock::<LockWaiting>(client, Some(Delivery::Refused(refusal.into_owned())));
            continue;
        }
        let max_ttl_ms = config::limits().max_ttl_ms;
        let deadline =
            lock::waiter_deadline(server_clock::now_ms(), waiter.wanted.ttl_ms, max_ttl_ms);
        // The grant's own reply follows; a failed renewal leaves the earlier lease.
        let _ = effects::extend(ctx, key, token, deadline);
        // A later wait that names a value sets it, as a same-token retry would: the
        // candidate's newest address is the one held.
        if let Some(value) = waiter
            .wanted
            .value
            .as_deref()
            .filter(|_| mode == Mode::Exclusive)
        {
            let _ = effects::proclaim(ctx, key, value);
        }
        with_registry(|r| r.reply_pending(waiter.client_id));
        let renewed = Delivery::Renewed {
            client_id: waiter.client_id,
            token: token.to_vec(),
            fence,
            as_list: waiter.wanted.all_keys,
        };
        blocked::unblock::<LockWaiting>(client, Some(renewed));
    }
}

/// A lock key `name` is being unlinked where no context is at hand (deleted, expired,
/// evicted, overwritten by another value): its queue is settled at the next chance,
/// and its shared holders' lease ends are no longer followed (`before_sleep`).
pub fn note_unlinked(db: i32, name: &[u8]) {
    if anyone_waiting() {
        with_registry(|r| r.note_changed((db, name.to_vec())));
    }
    holder_leases::note_unlinked(db, name);
}

/// Before the server sleeps: the queues of keys changed where no context was at hand
/// are settled, and the lease-end timers of shared locks that went are given back.
pub fn before_sleep(ctx: &Context) {
    settle_changed(ctx);
    holder_leases::stop_unlinked(ctx);
}

/// `SWAPDB` exchanged two databases (`swapped`, when the server says which): shared
/// holders' lease ends are followed in the database their lock is in now, and every
/// queue is settled, as the key each waits for may now be free or held anew.
pub fn databases_swapped(ctx: &Context, swapped: Option<(i32, i32)>) {
    if let Some((first, second)) = swapped {
        holder_leases::swapped(ctx, first, second);
    }
    settle_all_queues(ctx);
}

fn has_waiters(id: &KeyId) -> bool {
    with_registry(|r| r.count(id) > 0)
}

/// `name` moved to another node (`MIGRATE`): its lock is held there now, so nobody may
/// be handed it here. Every waiter is told to retry (`TRYAGAIN`).
pub fn key_moved(ctx: &Context, db: i32, name: &[u8]) {
    let id: KeyId = (db, name.to_vec());
    for taken in with_registry(|r| r.remove_key(&id)) {
        wait_over(ctx, &taken.waiter);
        blocked::unblock::<LockWaiting>(taken.client, Some(Delivery::Moved));
        // A wait for several keys also left the queues of its other keys.
        left_queues(ctx, taken.keys.into_iter().filter(|other| *other != id));
    }
    stop_abandoned_checks(ctx);
}

/// The names of the keys `session` waits for (in any database), for `LOCK.CLOSE` to
/// check before it ends those waits.
pub fn session_wait_keys(session: &[u8]) -> Vec<Vec<u8>> {
    if !anyone_waiting() {
        return Vec::new();
    }
    with_registry(|r| r.keys_where(|waiter| waiter.wanted.session.as_deref() == Some(session)))
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

/// `LOCK.CLOSE`: every waiting acquire of `session` is answered nil; the waiters behind
/// each may fit now. Returns how many were waiting.
pub fn end_session_waits(ctx: &Context, session: &[u8]) -> usize {
    if !anyone_waiting() {
        return 0;
    }
    let taken =
        with_registry(|r| r.take_where(|waiter| waiter.wanted.session.as_deref() == Some(session)));
    let count = taken.len();
    for Taken {
        client,
        keys,
        waiter,
    } in taken
    {
        wait_over(ctx, &waiter);
        blocked::unblock::<LockWaiting>(client, None);
        left_queues(ctx, keys);
    }
    stop_abandoned_checks(ctx);
    count
}

/// A wait left the queues, whichever way (granted, refused, timed out, moved, closed,
/// disconnected): its `BLOCK` timer stops and its length is recorded. Every `Taken`
/// passes here once.
fn wait_over(ctx: &Context, waiter: &Waiter) {
    wait_over_at(ctx, waiter, server_clock::now_micros());
}

/// As `wait_over`, at `now_us` (a grant's own clock read, which its fence is made of).
fn wait_over_at(ctx: &Context, waiter: &Waiter, now_us: u64) {
    block_timeouts::disarm(ctx, waiter.timeout_timer);
    durations::wait_ended(now_us.saturating_sub(waiter.since_us));
}

/// Removes a still-queued waiter and stops its timeout timer; false when it was already
/// granted or gone.
fn dequeue(ctx: &Context, client: BlockedClient) -> bool {
    let Some(Taken { keys, waiter, .. }) = with_registry(|r| r.take(client, None)) else {
        return false;
    };
    wait_over(ctx, &waiter);
    stop_abandoned_checks(ctx);
    left_queues(ctx, keys);
    true
}

/// A wait for `keys` left without being granted (timeout, `CLIENT UNBLOCK`, disconnect,
/// `LOCK.CLOSE`): where it stood first, the waiters behind it may fit now (shared
/// waiters behind an exclusive one, anyone behind a wait for several keys), so each
/// queue is settled right after.
fn left_queues(ctx: &Context, keys: impl IntoIterator<Item = KeyId>) {
    for key in keys {
        if has_waiters(&key) {
            key_changed(ctx, key.0, &key.1);
        }
    }
}

/// Whether the client with this `CLIENT ID` was handed a lock that Redis has not yet
/// replied to (see the module docs: `CLIENT UNBLOCK` must not reach it).
pub fn reply_pending(client_id: u64) -> bool {
    with_registry(|r| r.is_reply_pending(client_id))
}

/// The grant's reply was sent, or will never be: the client is an ordinary one again.
fn reply_settled(client_id: u64) {
    with_registry(|r| r.reply_settled(client_id));
}
