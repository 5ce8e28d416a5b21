//! Server events: after a flush, a `SWAPDB` or a load every queue is settled against
//! what its key holds now; a load or a role change can mean that the replication
//! stream has a reader; before the event loop sleeps the command that unlinked a lock
//! is certainly over, queues of overwritten locks are settled and the lease-end timers
//! of shared locks that went are stopped. The index of sessions follows flushes, swaps
//! and loads.

use redis_module::Context;

use crate::blocking;
use crate::durations;
use crate::ffi::data_type;
use crate::ffi::events::{
    EventData, BECAME_REPLICA, BEFORE_SLEEP, CHILD_BORN, FLUSH_ENDED, LOADING_ENDED, LOADING_FAILED,
};
use crate::ffi::node_state_form;
use crate::ffi::server;
use crate::hooks::filter;
use crate::keyspace::{held_keys, propagation, sessions, unlinked};
use crate::observing;
use crate::stats;

pub fn flushed(ctx: &Context, subevent: u64, data: EventData) {
    if subevent == FLUSH_ENDED {
        observing::note_all_changed();
        sessions::flushed(data.flushed);
        held_keys::flushed(data.flushed);
        blocking::settle_all_queues(ctx);
    }
}

/// Loading an RDB or AOF can leave a replication backlog behind, replaces every key a
/// client may be waiting for (`DEBUG RELOAD`), and brings shared locks whose holders'
/// lease ends nothing follows yet, and locks whose sessions the index does not know.
pub fn loaded(ctx: &Context, subevent: u64, _: EventData) {
    match subevent {
        LOADING_ENDED => {
            durations::set_loading(false);
            observing::note_all_changed();
            propagation::check_server(ctx);
            blocking::settle_all_queues(ctx);
            held_keys::loaded(ctx, &data_type::take_loaded_any());
            let loaded = data_type::take_loaded();
            sessions::index_loaded(ctx, &loaded);
            blocking::follow_loaded(ctx, loaded);
        }
        LOADING_FAILED => {
            durations::set_loading(false);
            drop(data_type::take_loaded());
            drop(data_type::take_loaded_any());
        }
        _ => {
            durations::set_loading(true);
            data_type::loading_started();
        }
    }
}

/// `CONFIG SET` may have turned the AOF on (`appendonly`), which from then on reads
/// the replication stream.
pub fn config_changed(ctx: &Context, _subevent: u64, _: EventData) {
    propagation::check_aof(ctx);
}

/// A server that was ever a replica keeps a backlog for its own replicas.
pub fn role_changed(_ctx: &Context, subevent: u64, _: EventData) {
    if subevent == BECAME_REPLICA {
        propagation::replication_started();
    }
}

/// `SWAPDB` exchanged two databases under the waiters' feet: the key each queue waits
/// for may now be free, or held with another deadline; shared holders' lease ends are
/// followed in the database their lock is in now.
pub fn swapped_databases(ctx: &Context, _subevent: u64, data: EventData) {
    observing::note_all_changed();
    if let Some((first, second)) = data.swapped {
        sessions::swapped(first, second);
        held_keys::swapped(first, second);
    }
    blocking::databases_swapped(ctx, data.swapped);
}

/// An AOF rewrite forked its child, after the AOF that follows the rewrite was opened:
/// the node's state goes there, since a rewrite without the RDB preamble carries it only
/// with a lock or mark key to write, and there may be none (every mark evicted).
pub fn forked(ctx: &Context, subevent: u64, _: EventData) {
    if subevent == CHILD_BORN && server::aof_rewrite_running(ctx) {
        node_state_form::replicate(ctx);
    }
}

/// Before the server sleeps: the command that unlinked a lock is certainly over,
/// queues whose lock was overwritten are looked at again, and shared locks that went
/// give back their lease-end timers.
pub fn event_loop(ctx: &Context, subevent: u64, _: EventData) {
    if subevent == BEFORE_SLEEP {
        unlinked::forget();
        // Only a reset the server ran sets its statistics back.
        if filter::take_resetstat() {
            stats::reset_counters();
            durations::reset();
        }
        blocking::before_sleep(ctx);
        // Last: the changes of this turn, handoffs included, are all made.
        observing::answer_changed(ctx);
    }
}
