//! Contention over overlapping sets of keys: 16 and 32 clients, each its own process
//! (`client`), each asking for 4 distinct keys out of 16 (drawn anew for every
//! grant), with `LOCK.ACQUIREALL … BLOCK` or as a client-side multi-lock with backoff.
//! Both mechanisms run back to back in alternating order within each repetition, on a
//! flushed server; the contenders' tallies reduce to grants/s, the wait from ask to
//! grant (p50/p99/max), failed attempts per grant and Jain's index, as scenario 3's.

use std::io;
use std::process::Command;

use crate::measure::acquireall::client::{
    self, BACKOFF_BASE_US, BACKOFF_CAP_US, BLOCK_TIMEOUT_MS, HOLD, THINK_MAX_US,
};
use crate::measure::contention::processes;
use crate::measure::server::{self, flush, Server};
use crate::results::acquireall::{ContentionPlan, Mechanism, MultiKeyContention};
use crate::results::Workload;

/// Client counts contending.
const CLIENTS: [usize; 2] = [16, 32];
const KEYSPACE: u64 = 16;
const KEYS_PER_SET: u64 = 4;

pub fn plan(workload: &Workload) -> ContentionPlan {
    ContentionPlan {
        keyspace: KEYSPACE,
        keys_per_set: KEYS_PER_SET,
        duration_ms: workload.contention_ms,
        think_max_ms: THINK_MAX_US as f64 / 1e3,
        hold_ms: HOLD.as_secs_f64() * 1e3,
        backoff_base_ms: BACKOFF_BASE_US as f64 / 1e3,
        backoff_cap_ms: BACKOFF_CAP_US as f64 / 1e3,
        block_timeout_ms: BLOCK_TIMEOUT_MS,
    }
}

/// The `multikey-contender` subcommand for one client.
fn command(
    port: u16,
    index: usize,
    mechanism: Mechanism,
    plan: &ContentionPlan,
) -> io::Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("multikey-contender")
        .arg(port.to_string())
        .arg(index.to_string())
        .args(client::args(mechanism, plan.keyspace, plan.keys_per_set));
    Ok(command)
}

pub fn run(
    server: &Server,
    workload: &Workload,
    plan: &ContentionPlan,
) -> io::Result<Vec<MultiKeyContention>> {
    let mut admin = server::connect(server)?;
    let mut results: Vec<MultiKeyContention> = CLIENTS
        .iter()
        .flat_map(|&clients| {
            Mechanism::ALL.map(|mechanism| MultiKeyContention {
                clients,
                mechanism,
                samples: Vec::new(),
            })
        })
        .collect();
    for rep in 0..workload.repetitions {
        for pair in results.chunks_mut(Mechanism::ALL.len()) {
            let mut order: Vec<usize> = (0..pair.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for m in order {
                let entry = &mut pair[m];
                flush(&mut admin)?;
                let commands = (0..entry.clients)
                    .map(|index| command(server.port, index, entry.mechanism, plan))
                    .collect::<io::Result<Vec<_>>>()?;
                let tallies = processes::run(commands, plan.duration_ms)?;
                let sample = processes::reduce(&tallies, plan.duration_ms)?;
                eprintln!(
                    "  [rep {}/{}] {:>2} clients, {} of {} keys  {:<27} {}",
                    rep + 1,
                    workload.repetitions,
                    entry.clients,
                    plan.keys_per_set,
                    plan.keyspace,
                    entry.mechanism.label(),
                    processes::summary(&sample),
                );
                entry.samples.push(sample);
            }
        }
    }
    flush(&mut admin)?;
    Ok(results)
}
