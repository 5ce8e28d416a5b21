//! Faults and hostile input: crashes, pauses, failovers and outside disruption under
//! load, judged by the history checkers (`reliability`), plain clients' and session
//! clients' alike (`sessions`); random argv; memory and leaks; panics stopped at the
//! module's boundary; waits for several keys at once under contention (`acquire_all`);
//! slots moving by atomic slot migration under load (`slot_migration`).
//! `make soak` runs the scenarios at full length.

mod acquire_all;
mod checkers_catch;
mod crash;
mod disrupt;
mod election;
mod failover;
mod guarded;
mod input;
mod memory;
mod observers;
mod once;
mod panics;
mod partition;
mod pause;
mod reliability;
mod scaling;
mod sessions;
mod slot_migration;
