//! Scenario 8: many keys at once (`LOCK.ACQUIREALL`, issue 23), in three parts.
//!
//! - `cycles`: the four-key cycle on the benchmark's server, `LOCK.ACQUIREALL` of 4 keys
//!   against 4 `LOCK.ACQUIRE`s sent in one write under the same token (each released by
//!   4 `LOCK.RELEASE`s in one write), pipelined and unpipelined, as scenario 1 measures
//!   throughput (the load driver, alternating order, a disturbed run run again).
//! - `overlapping_sets`: clients in separate processes (`contender`) over overlapping 4-key
//!   sets of 16 keys, `LOCK.ACQUIREALL … BLOCK` against a client-side multi-lock that
//!   takes the keys one by one without `BLOCK` and backs off (jittered, exponential) on a
//!   refusal, as scenario 3 measures contention.
//! - `waits`: server CPU per acquire that waits (`LOCK.ACQUIRE … BLOCK` on a held key,
//!   measured until it is queued; `CLIENT UNBLOCK` ends it outside the measurement),
//!   with deadlock detection on and off, thousands of waiters already queued, on
//!   servers of their own (the cost curves' set-up: many clients).

pub mod client;
mod cycles;
mod overlapping_sets;
mod waits;

use std::io;

use crate::measure::server::Server;
use crate::results::acquireall::{ContentionPlan, MultiKeyContention, WaitCost};
use crate::results::throughput::GroupResult;
use crate::results::Workload;

/// The parts that run on the benchmark's own server: the four-key cycles and the
/// contention.
pub fn run(
    server: &Server,
    workload: &Workload,
) -> io::Result<(Vec<GroupResult>, ContentionPlan, Vec<MultiKeyContention>)> {
    eprintln!("  four-key cycle: LOCK.ACQUIREALL against 4 pipelined LOCK.ACQUIRE");
    let cycles = cycles::run(server, workload)?;
    eprintln!(
        "  contention over overlapping 4-key sets: ACQUIREALL BLOCK against a client multi-lock"
    );
    let plan = overlapping_sets::plan(workload);
    let contention = overlapping_sets::run(server, workload, &plan)?;
    Ok((cycles, plan, contention))
}

/// The waiting acquires with detection on and off, each shape on a server of its own.
pub fn waits(pinned: bool, workload: &Workload) -> io::Result<WaitCost> {
    eprintln!("  an acquire that waits, deadlock detection on against off");
    waits::run(pinned, workload)
}
