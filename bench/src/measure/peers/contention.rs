//! Row 2 of the etcd side by side: one lock, 4 and 32 clients, each its own process,
//! each looping as in scenario 3 — think 0–2 ms, ask, hold 0.5 ms, release — with the
//! wait done by the server: fencelock's `LOCK.ACQUIRE … BLOCK` (scenario 3's own
//! `contender`, on either fencelock server), etcd's `Lock` RPC, which returns once the
//! caller's key has the lowest create revision under the lock's name. The etcd client
//! is `etcd-contender` below, the bench binary re-executed, speaking the `contender`
//! protocol (`ready`, `go <ms>`, one JSON `Tally` line); this file also gathers the
//! tallies into the contention scenario's `Sample`.

use std::io::{self, BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use crate::measure::contender::{self, Tally};
use crate::measure::peers::etcd::{self, connect};
use crate::results::contention::{Lock, Mode, Sample};
use crate::stats::{jain, percentile_ms, wait_histogram};

const THINK_MAX_US: u64 = 2_000;
const HOLD: Duration = Duration::from_micros(500);
/// Lease of an etcd contender (seconds): longer than any run; revoked at its end.
const LEASE_S: i64 = 600;

/// Who the contenders ask.
pub enum Target<'a> {
    Fencelock {
        port: u16,
    },
    /// `name`: the lock's name, new for each run, so that nothing a run left behind
    /// (a contender that died holding) can stand in the next run's way.
    Etcd {
        url: &'a str,
        name: &'a str,
    },
}

struct Contender {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Contender {
    /// A contender is never left running: on an early return it is killed.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn(target: &Target, index: usize) -> io::Result<Contender> {
    let mut command = Command::new(std::env::current_exe()?);
    match target {
        Target::Fencelock { port } => command
            .arg("contender")
            .arg(port.to_string())
            .arg(index.to_string())
            .args(contender::args(Lock::Mutex, Mode::Block)),
        Target::Etcd { url, name } => command
            .arg("etcd-contender")
            .arg(url)
            .arg(name)
            .arg(index.to_string()),
    };
    let mut child = command
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

/// Runs `clients` contenders against `target` for `duration_ms`.
pub fn run_once(target: &Target, clients: usize, duration_ms: u64) -> io::Result<Sample> {
    let mut contenders = (0..clients)
        .map(|index| spawn(target, index))
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
    let mut tallies = Vec::with_capacity(clients);
    for contender in &mut contenders {
        let line = read_line(contender)?;
        let tally: Tally = serde_json::from_str(&line)
            .map_err(|e| io::Error::other(format!("contender report {line:?}: {e}")))?;
        tallies.push(tally);
    }
    for contender in &mut contenders {
        let status = contender.child.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "a contender exited with {status}"
            )));
        }
    }
    reduce(&tallies, duration_ms)
}

/// The contenders' tallies as one sample, reduced as scenario 3 reduces its own.
fn reduce(tallies: &[Tally], duration_ms: u64) -> io::Result<Sample> {
    let mut waits = wait_histogram();
    for wait in tallies.iter().flat_map(|t| &t.waits_us) {
        waits
            .record(*wait)
            .map_err(|e| io::Error::other(format!("wait {wait}: {e}")))?;
    }
    let per_client_grants: Vec<u64> = tallies.iter().map(|t| t.grants_in_window).collect();
    let shares: Vec<f64> = per_client_grants.iter().map(|&g| g as f64).collect();
    let granted: u64 = tallies.iter().map(|t| t.grants).sum();
    let failed: u64 = tallies.iter().map(|t| t.failed).sum();
    Ok(Sample {
        grants_per_s: per_client_grants.iter().sum::<u64>() as f64 / (duration_ms as f64 / 1e3),
        p50_ms: percentile_ms(&waits, 50.0),
        p90_ms: percentile_ms(&waits, 90.0),
        p99_ms: percentile_ms(&waits, 99.0),
        max_ms: percentile_ms(&waits, 100.0),
        wait_count: waits.len(),
        failed_per_grant: failed as f64 / granted.max(1) as f64,
        failed,
        lost: tallies.iter().map(|t| t.lost).sum(),
        jain: jain(&shares),
        per_client_grants,
        waits,
    })
}

/// Entry point of `etcd-contender <url> <lock-name> <client-index>`: one lease of its
/// own, then the contender loop with `Lock(name, lease)` and `Unlock(key)`. A `Lock`
/// that fails is an error, not a failed attempt: etcd's waits have no timeout here.
pub fn main(args: &[String]) -> io::Result<()> {
    let (Some(url), Some(name), Some(index)) = (
        args.first(),
        args.get(1),
        args.get(2).and_then(|i| i.parse::<u64>().ok()),
    ) else {
        return Err(io::Error::other(format!(
            "bad etcd-contender arguments {args:?}"
        )));
    };
    let runtime = etcd::runtime()?;
    let (mut client, lease) = runtime.block_on(async {
        let mut client = connect(url).await?;
        let lease = client
            .lease_grant(LEASE_S, None)
            .await
            .map_err(etcd::error)?;
        Ok::<_, io::Error>((client, lease.id()))
    })?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xFE4C_E10C ^ index);
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    let duration_ms: u64 = line
        .strip_prefix("go ")
        .and_then(|d| d.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("expected `go <ms>`, got {line:?}")))?;
    let tally = runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_millis(duration_ms);
        let mut tally = Tally {
            grants: 0,
            grants_in_window: 0,
            failed: 0,
            lost: 0,
            waits_us: Vec::new(),
        };
        while Instant::now() < deadline {
            // Blocking sleeps, as the fencelock contender's: tokio's timer counts in
            // whole milliseconds, and nothing else on this runtime has to run meanwhile.
            std::thread::sleep(Duration::from_micros(rng.gen_range(0..=THINK_MAX_US)));
            let asked = Instant::now();
            let options = etcd_client::LockOptions::new().with_lease(lease);
            let held = client
                .lock(name.as_str(), Some(options))
                .await
                .map_err(etcd::error)?;
            let granted = Instant::now();
            std::thread::sleep(HOLD);
            client.unlock(held.key()).await.map_err(etcd::error)?;
            tally.grants += 1;
            if granted <= deadline {
                tally.grants_in_window += 1;
            }
            tally
                .waits_us
                .push(u64::try_from(granted.duration_since(asked).as_micros()).unwrap_or(u64::MAX));
        }
        client.lease_revoke(lease).await.map_err(etcd::error)?;
        Ok::<_, io::Error>(tally)
    })?;
    let report = serde_json::to_string(&tally).map_err(io::Error::other)?;
    writeln!(stdout, "{report}")?;
    stdout.flush()
}
