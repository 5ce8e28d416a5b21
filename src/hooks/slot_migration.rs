//! Atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`, Redis 8.4+'s `CLUSTER
//! MIGRATION`), seen from the locks. The keys themselves travel in the server's own
//! stream (on Valkey a lock as the `LOCK.APPLY`s of its AOF form, on Redis as a
//! `RESTORE` payload; then the effects propagated while the migration runs), which
//! raises the target's fence clock past every fence it carries and indexes the sessions
//! of what arrives; what stays here for the module:
//!
//! - When this node begins sending slots, lock changes are propagated as effects from
//!   then on, as for a replica (`keyspace::propagation`).
//! - When this node gives the slots away, the clients waiting for or observing keys of
//!   those slots are answered `TRYAGAIN`, as for a `MIGRATE`d key: their wait goes on
//!   at the new owner. The keys go with the server's trimming (each unlinked, so the
//!   session index forgets them; none is counted as a release).
//! - Redis 8.4+ asks each module for commands of its own for the stream: this node's
//!   fence clock and mark floor (`LOCK.CLOCK`), so the target's next grant of a moved
//!   key is above every grant of it here, and a missing mark there admits no fence this
//!   node's floor refused.

use fencelock_core::slot::key_slot;
use redis_module::Context;

use crate::blocking;
use crate::ffi::slot_migration::{self, Migration, SlotRange};
use crate::keyspace::propagation;
use crate::node_fence;
use crate::observing;

/// Handler of every migration event.
pub fn migration(ctx: &Context, migration: Migration) {
    match migration {
        // The migration reads this node's replication stream: from now on every lock
        // change goes there as its effects (token, fence, deadline), never as the
        // command, which the target would run again with a token and fence of its own.
        Migration::ExportStarted(_) => propagation::replication_started(),
        Migration::Exported(slots) => moved_away(ctx, &slots),
        Migration::AddToStream => add_node_state(ctx),
        _ => {}
    }
}

/// Redis 8.4+: this node's fence clock and mark floor go with the slots.
fn add_node_state(ctx: &Context) {
    let (last, floor) = (node_fence::last(), node_fence::mark_floor());
    if !slot_migration::propagate_node_state(ctx, last, floor) {
        ctx.log_warning("fencelock: could not add the fence clock to a slot migration's stream");
    }
}

/// The slots went to another node: every wait and observation of their keys is
/// answered `TRYAGAIN` now (not at its `BLOCK` timeout).
fn moved_away(ctx: &Context, slots: &[SlotRange]) {
    let moved = |name: &[u8]| {
        let slot = key_slot(name);
        slots
            .iter()
            .any(|&(start, end)| (start..=end).contains(&slot))
    };
    for (db, name) in observing::observed_keys() {
        if moved(&name) {
            observing::key_moved(ctx, db, &name);
        }
    }
    for (db, name) in blocking::waited_keys() {
        if moved(&name) {
            blocking::key_moved(ctx, db, &name);
        }
    }
}
