//! Scenario 3: one key, clients in separate processes, fencelock `BLOCK` against
//! polling at 50 ms and 5 ms: a lock with 4 and 32 clients (polling `SET NX PX`), and a
//! semaphore of 4 permits with 32 clients (polling the ZSET semaphore script). Starts
//! the contenders, releases them together, gathers their counts and waits (into an
//! HdrHistogram), and reduces them to grants/s, wait p50/p99/max, failed attempts per
//! grant and Jain's index over per-client grants.

use std::io::{self, BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use hdrhistogram::Histogram;

use crate::measure::contender::{self, Lock, Mode};
use crate::measure::server::{self, flush, Server};
use crate::settings::Settings;
use crate::stats::{jain, percentile_ms, wait_histogram};

pub const MODES: [Mode; 3] = [
    Mode::Block,
    Mode::Poll { retry_ms: 50 },
    Mode::Poll { retry_ms: 5 },
];

/// One repetition of one (lock, clients, mode).
#[derive(Debug, Clone)]
pub struct Sample {
    pub grants_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub failed_per_grant: f64,
    pub failed: u64,
    /// Releases that found the lease gone (never expected: ttl ≫ hold).
    pub lost: u64,
    pub jain: f64,
    pub per_client_grants: Vec<u64>,
    /// Every wait of the run (ask to grant), in µs.
    pub waits: Histogram<u64>,
}

#[derive(Debug, Clone)]
pub struct ContentionResult {
    pub lock: Lock,
    pub clients: usize,
    pub mode: Mode,
    pub samples: Vec<Sample>,
}

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
        let report: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| io::Error::other(format!("contender report {line:?}: {e}")))?;
        let count = |field: &str| report[field].as_u64().unwrap_or(0);
        per_client_grants.push(count("grants_in_window"));
        granted += count("grants");
        failed += count("failed");
        lost += count("lost");
        for wait in report["waits_us"].as_array().into_iter().flatten() {
            waits
                .record(wait.as_u64().unwrap_or(0))
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
        p99_ms: percentile_ms(&waits, 99.0),
        max_ms: percentile_ms(&waits, 100.0),
        failed_per_grant: failed as f64 / granted.max(1) as f64,
        failed,
        lost,
        jain: jain(&shares),
        per_client_grants,
        waits,
    })
}

/// What is contended for, with how many clients: the lock with each of
/// `contention_clients`, then the semaphore with each of `semaphore_clients`.
pub fn setups(settings: &Settings) -> Vec<(Lock, usize)> {
    let semaphore = Lock::Semaphore {
        limit: settings.semaphore_limit,
    };
    let locks = settings
        .contention_clients
        .iter()
        .map(|&c| (Lock::Mutex, c));
    let semaphores = settings.semaphore_clients.iter().map(|&c| (semaphore, c));
    locks.chain(semaphores).collect()
}

/// Every (lock, client count) × mode, `settings.repetitions` times, modes alternating.
pub fn run(server: &Server, settings: &Settings) -> io::Result<Vec<ContentionResult>> {
    let mut admin = server::connect(server)?;
    let mut results: Vec<ContentionResult> = setups(settings)
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
    for rep in 0..settings.repetitions {
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
                    settings.contention_ms,
                )?;
                eprintln!(
                    "  [rep {}/{}] {:<14} {:>2} clients  {:<16} {:>7.0} grants/s  wait p50 {:>7.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  failed/grant {:>6.2}  Jain {:.3}",
                    rep + 1,
                    settings.repetitions,
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
