//! Scenario 3: one key, clients in separate processes, fencelock `BLOCK` against
//! polling at 50 ms and 5 ms: a lock with 4 and 32 clients (polling `SET NX PX`), and a
//! semaphore of 4 permits with 32 clients (polling the ZSET semaphore script). Starts
//! the contenders, releases them together, gathers their counts and waits (into an
//! HdrHistogram), and reduces them to grants/s, wait p50/p99/max, failed attempts per
//! grant and Jain's index over per-client grants.

use std::io::{self, BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::measure::contender::{self, Tally};
use crate::measure::server::{self, flush, Server};
use crate::results::contention::{ContentionResult, Lock, Mode, Sample, MODES};
use crate::results::Workload;
use crate::stats::{jain, percentile_ms, wait_histogram};

struct Contender {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn spawn(port: u16, index: usize, lock: Lock, mode: Mode) -> io::Result<Contender> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("contender")
        .arg(port.to_string())
        .arg(index.to_string())
        .args(contender::args(lock, mode))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(io::Error::other("contender without pipes"));
    };
    Ok(Contender {
        child,
        stdin,
        stdout: BufReader::new(stdout),
    })
}

fn read_line(contender: &mut Contender) -> io::Result<String> {
    let mut line = String::new();
    contender.stdout.read_line(&mut line)?;
    if line.is_empty() {
        return Err(io::Error::other("a contender exited early"));
    }
    Ok(line)
}

/// Runs one (lock, clients, mode) for `duration_ms`.
fn run_once(
    server: &Server,
    lock: Lock,
    clients: usize,
    mode: Mode,
    duration_ms: u64,
) -> io::Result<Sample> {
    let mut contenders = (0..clients)
        .map(|index| spawn(server.port, index, lock, mode))
        .collect::<io::Result<Vec<_>>>()?;
    for contender in &mut contenders {
        let line = read_line(contender)?;
        if line.trim() != "ready" {
            return Err(io::Error::other(format!("contender said {line:?}")));
        }
    }
    for contender in &mut contenders {
        writeln!(contender.stdin, "go {duration_ms}")?;
        contender.stdin.flush()?;
    }
    let mut per_client_grants = Vec::with_capacity(clients);
    let (mut failed, mut lost, mut granted) = (0u64, 0u64, 0u64);
    let mut waits = wait_histogram();
    for contender in &mut contenders {
        let line = read_line(contender)?;
        let tally: Tally = serde_json::from_str(&line)
            .map_err(|e| io::Error::other(format!("contender report {line:?}: {e}")))?;
        per_client_grants.push(tally.grants_in_window);
        granted += tally.grants;
        failed += tally.failed;
        lost += tally.lost;
        for wait in tally.waits_us {
            waits
                .record(wait)
                .map_err(|e| io::Error::other(format!("wait {wait}: {e}")))?;
        }
    }
    for mut contender in contenders {
        let status = contender.child.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "a contender exited with {status}"
            )));
        }
    }
    let in_window: u64 = per_client_grants.iter().sum();
    let shares: Vec<f64> = per_client_grants.iter().map(|&g| g as f64).collect();
    Ok(Sample {
        grants_per_s: in_window as f64 / (duration_ms as f64 / 1e3),
        p50_ms: percentile_ms(&waits, 50.0),
        p90_ms: percentile_ms(&waits, 90.0),
        p99_ms: percentile_ms(&waits, 99.0),
        max_ms: percentile_ms(&waits, 100.0),
        wait_count: waits.len(),
        failed_per_grant: failed as f64 / granted.max(1) as f64,
        failed,
        lost,
        jain: jain(&shares),
        per_client_grants,
        waits,
    })
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
                    "  [rep {}/{}] {:<14} {:>2} clients  {:<16} {:>7.0} grants/s  wait p50 {:>7.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  failed/grant {:>6.2}  Jain {:.3}",
                    rep + 1,
                    workload.repetitions,
                    entry.lock.label(),
                    entry.clients,
                    entry.mode.label(),
                    sample.grants_per_s,
                    sample.p50_ms,
                    sample.p99_ms,
                    sample.max_ms,
                    sample.failed_per_grant,
                    sample.jain
                );
                entry.samples.push(sample);
            }
        }
    }
    flush(&mut admin)?;
    Ok(results)
}
