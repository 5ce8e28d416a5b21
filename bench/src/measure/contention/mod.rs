//! Scenario 3: one key, clients in separate processes, fencelock `BLOCK` against
//! polling at 50 ms and 5 ms: a lock with 4 and 32 clients (polling `SET NX PX`), and a
//! semaphore of 4 permits with 32 clients (polling the ZSET semaphore script). Starts
//! the contenders, releases them together, gathers their counts and waits (into an
//! HdrHistogram), and reduces them to grants/s, wait p50/p99/max, failed attempts per
//! grant and Jain's index over per-client grants.

pub mod client;
pub mod processes;

use std::io;
use std::process::Command;

use crate::measure::server::{self, flush, Server};
use crate::results::contention::{ContentionResult, Lock, Mode, Sample, MODES};
use crate::results::Workload;
/// The `contender` subcommand for one client.
fn command(port: u16, index: usize, lock: Lock, mode: Mode) -> io::Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("contender")
        .arg(port.to_string())
        .arg(index.to_string())
        .args(client::args(lock, mode));
    Ok(command)
}

/// Runs one (lock, clients, mode) for `duration_ms`.
fn run_once(
    server: &Server,
    lock: Lock,
    clients: usize,
    mode: Mode,
    duration_ms: u64,
) -> io::Result<Sample> {
    let commands = (0..clients)
        .map(|index| command(server.port, index, lock, mode))
        .collect::<io::Result<Vec<_>>>()?;
    processes::reduce(&processes::run(commands, duration_ms)?, duration_ms)
}

/// Every (lock, client count) × mode, `workload.repetitions` times, modes alternating.
pub fn run(server: &Server, workload: &Workload) -> io::Result<Vec<ContentionResult>> {
    let mut admin = server::connect(server)?;
    let mut results: Vec<ContentionResult> = workload
        .contention_setups()
        .into_iter()
        .flat_map(|(lock, clients)| {
            MODES.iter().map(move |&mode| ContentionResult {
                lock,
                clients,
                mode,
                samples: Vec::new(),
            })
        })
        .collect();
    for rep in 0..workload.repetitions {
        for result in results.chunks_mut(MODES.len()) {
            let mut order: Vec<usize> = (0..result.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for m in order {
                let entry = &mut result[m];
                flush(&mut admin)?;
                let sample = run_once(
                    server,
                    entry.lock,
                    entry.clients,
                    entry.mode,
                    workload.contention_ms,
                )?;
                eprintln!(
                    "  [rep {}/{}] {:<14} {:>2} clients  {:<16} {}",
                    rep + 1,
                    workload.repetitions,
                    entry.lock.label(),
                    entry.clients,
                    entry.mode.label(),
                    processes::summary(&sample),
                );
                entry.samples.push(sample);
            }
        }
    }
    flush(&mut admin)?;
    Ok(results)
}
