//! Redis's generic, expired and evicted keyspace events, seen from the lock keys and
//! fence marks: an expired lease is counted and announced as `lock.expired`, an evicted
//! lock as `lock.evicted`, an evicted or expired mark raises the mark floor; any change
//! to a key that clients wait for (gone, a new deadline, a new value) settles its
//! queue. Also the
//! data type's word that a lock key is being unlinked, which is all the module hears
//! of a lock overwritten by another value (`SET` over it announces itself in a class
//! the module does not follow).

use fencelock_core::value::LockRef;
use redis_module::{Context, RedisString};

use crate::blocking;
use crate::ffi::server::{selected_db, slot_served_elsewhere};
use crate::ffi::server_clock;
use crate::hooks::filter;
use crate::keyspace::unlinked::{self, Gone};
use crate::keyspace::{effects, held_keys, lock_events, sessions};
use crate::observing;
use crate::stats;

/// Redis 8.4+'s event for a key of a slot given away, trimmed after the migration.
const TRIMMED: &str = "key_trimmed";

/// Subscriber for Redis's generic, expired and evicted keyspace events (and trimmed
/// keys, where the server has them).
pub fn on_event(ctx: &Context, event: &str, name: &[u8]) {
    let db = selected_db(ctx);
    // Whatever happened to an observed key, its observers look again.
    observing::note_changed(db, name);
    let gone = unlinked::take(db, name);
    // Made only for an event that announces something.
    let key = || RedisString::create_from_slice(ctx.ctx, name);
    match (gone, event) {
        // A lock key expires with its last lease, and with it every holder whose lease
        // ended at the same time and was not dropped yet: one `lock.expired` each.
        (Some(Gone::Lock { holders }), "expired") => {
            let key = key();
            for _ in 0..holders {
                stats::EXPIRED.bump();
                lock_events::notify(ctx, lock_events::EXPIRED, &key);
            }
        }
        // Evicted under maxmemory: for its waiters a `DEL` (settled below), for its
        // holders a loss they should hear of.
        (Some(Gone::Lock { .. }), "evicted") => {
            stats::EVICTED.bump();
            lock_events::notify(ctx, lock_events::EVICTED, &key());
        }
        // An evicted mark, or one that expired (an expiry set by hand: a mark never
        // expires by itself; one already past deletes at once, which Redis 7.0 and 8.2
        // announce as `del`), would admit every older fence again: its fence becomes
        // the floor of every missing mark. Only `DEL` forgets a mark on purpose.
        (Some(Gone::Mark { fence }), _)
            if matches!(event, "evicted" | "expired")
                || (event == "del" && filter::running_expire()) =>
        {
            effects::mark_lost(ctx, &key(), fence, event == "evicted");
        }
        _ => {}
    }
    // A mark renamed or moved away from its name leaves its data unguarded there: its
    // fence becomes the mark floor, as an evicted mark's does (`SWAPDB` moves marks and
    // data together, and `DEL` or an overwrite forgets a mark on purpose).
    if matches!(event, "rename_to" | "move_to") {
        effects::mark_moved(ctx, &key());
    }
    // A shared lock made permanent (PERSIST, or RESTORE without a ttl), given a later
    // expiry (PEXPIRE), renamed or moved to another database still goes with its last
    // holder's lease, and each holder with its own: an emptied
    // key must not linger (nor count as held). `expire` comes with every `SET … PX` of
    // any key too; looking costs one key lookup.
    if matches!(
        event,
        "persist" | "restore" | "rename_to" | "move_to" | "expire"
    ) {
        blocking::follow_anew(ctx, name);
    }
    // An exclusive lease moved by hand (`PEXPIRE`, `PERSIST` of a lock key) now ends
    // with the key's new expiry: the index of held keys keeps it for the hold histogram.
    if matches!(event, "persist" | "expire") {
        held_keys::expiry_changed(ctx, name);
    }
    // A lock that arrives under this name brings its sessions' holdings with it.
    if matches!(event, "restore" | "rename_to" | "move_to" | "copy_to") {
        sessions::index_key(ctx, name);
        held_keys::arrived(ctx, name);
    }
    // The key left for another node (`MIGRATE`, Redis 8.4+ trimming a slot it gave
    // away, or the keys of a slot this node lost, which Valkey and Redis delete as
    // `del`): its waiters go on there, they are not handed a lock held elsewhere (nor
    // is a key written into a slot this node no longer owns).
    let moved = (event == "del" && filter::running_migrate())
        || event == TRIMMED
        || (event == "del" && slot_lost(ctx, db, name));
    if moved {
        observing::key_moved(ctx, db, name);
    }
    // Its holdings ended here (a lock moved to another node goes on being held there;
    // renamed or moved to another database, here under another name).
    if matches!(gone, Some(Gone::Lock { .. }))
        && matches!(event, "expired" | "evicted" | "del")
        && !moved
    {
        unlinked::held_ended(server_clock::now_micros());
    }
    // Keys nobody waits for need nothing more: the common case stays cheap.
    if !blocking::anyone_waiting() {
        return;
    }
    // Any other change to a waited-for key (gone, a new deadline from PEXPIRE or
    // PERSIST, a new value from RESTORE, RENAME or COPY) re-settles its queue.
    // An eviction is one step of a loop that goes on while memory is short: a lock
    // handed over inside it would be the next one evicted, so it is handed over after.
    if moved {
        blocking::key_moved(ctx, db, name);
    } else if event == "evicted" {
        blocking::key_changed(ctx, db, name);
    } else {
        blocking::key_announced(ctx, db, name);
    }
}

/// Whether a deleted key that clients wait for or observe went with a slot this node
/// no longer serves. Asked only then: a `DEL` of any other key costs nothing more.
fn slot_lost(ctx: &Context, db: i32, name: &[u8]) -> bool {
    (blocking::is_queued(ctx, name) || observing::count(db, name) > 0)
        && slot_served_elsewhere(ctx, name)
}

/// A lock key is being unlinked (deleted, expired, evicted or overwritten). No context
/// is at hand here: the queue, if any, is settled at the next chance; the sessions it
/// held no longer hold it here.
pub fn on_unlink(db: i32, name: &[u8], lock: LockRef) {
    let holders = match lock {
        LockRef::Shared(set) => set.len(),
        LockRef::Exclusive(_) | LockRef::Quarantined(_) => 1,
    };
    observing::note_changed(db, name);
    sessions::unlinked(db, name, lock);
    unlinked::note(db, name, Gone::Lock { holders }, |held| {
        note_held(db, name, lock, held);
    });
    blocking::note_unlinked(db, name);
}

/// The holdings of an unlinked lock, kept with the note until Redis says why it went
/// (`on_event`), as (start µs, end µs or 0): each holding's start and, for an exclusive
/// one, its lease end as the index of held keys kept them (a lease it did not see ends
/// "when announced"), a shared holder's lease end from its set, a lock-delay's from its
/// holding (a done record has no holding left). Their entries in the index end here.
fn note_held(db: i32, name: &[u8], lock: LockRef, held: &mut Vec<(u64, u64)>) {
    let us_of = |end_ms: i64| match u64::try_from(end_ms) {
        Ok(end_ms) if end_ms != i64::MAX as u64 => end_ms.saturating_mul(1000),
        _ => 0,
    };
    match lock {
        LockRef::Exclusive(holding) => {
            let ended = held_keys::ended(db, name, holding.fence());
            let end_ms = holding
                .lease_end_ms()
                .map_or(ended.lease_end_ms, |own| own.min(ended.lease_end_ms));
            held.push((ended.since_us, us_of(end_ms)));
        }
        LockRef::Shared(set) => held.extend(set.all().map(|holder| {
            let ended = held_keys::ended(db, name, holder.holding().fence());
            (ended.since_us, us_of(holder.deadline_ms()))
        })),
        LockRef::Quarantined(holding) => {
            let ended = held_keys::ended(db, name, holding.fence());
            if holding.lock_delay_ms() > 0 {
                let end_ms = holding.lease_end_ms().unwrap_or(i64::MAX);
                held.push((ended.since_us, us_of(end_ms)));
            }
        }
    }
}

/// A fence mark is being unlinked; only its eviction or expiry (announced next) matters.
pub fn on_mark_unlink(db: i32, name: &[u8], fence: u64) {
    unlinked::note(db, name, Gone::Mark { fence }, |_| {});
}
