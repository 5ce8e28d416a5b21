//! The parent's side of the contention scenarios' client processes (scenario 3 and the
//! etcd side by side): each contender is this binary re-executed as a subcommand
//! (`contender`, `etcd-contender`) that says `ready`, is released with `go <ms>`,
//! answers with its `Tally` as one JSON line and exits. Starting them all before
//! releasing any keeps process start-up out of the measured window. The tallies of a
//! run reduce to one `Sample` the same way for every lock service.

use std::io::{self, BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::measure::contention::client::Tally;
use crate::results::contention::Sample;
use crate::stats::{jain, percentile_ms, wait_histogram};

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

impl Contender {
    fn launch(command: &mut Command) -> io::Result<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other("contender without pipes"));
        };
        Ok(Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    fn read_line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        if line.is_empty() {
            return Err(io::Error::other("a contender exited early"));
        }
        Ok(line)
    }
}

/// Starts one contender per command, releases them together for `duration_ms`, and
/// returns their tallies once every one has exited cleanly.
pub fn run(commands: Vec<Command>, duration_ms: u64) -> io::Result<Vec<Tally>> {
    let mut contenders = commands
        .into_iter()
        .map(|mut command| Contender::launch(&mut command))
        .collect::<io::Result<Vec<_>>>()?;
    for contender in &mut contenders {
        let line = contender.read_line()?;
        if line.trim() != "ready" {
            return Err(io::Error::other(format!("contender said {line:?}")));
        }
    }
    for contender in &mut contenders {
        writeln!(contender.stdin, "go {duration_ms}")?;
        contender.stdin.flush()?;
    }
    let mut tallies = Vec::with_capacity(contenders.len());
    for contender in &mut contenders {
        let line = contender.read_line()?;
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
    Ok(tallies)
}

/// One sample's figures for a progress line on stderr, after the line's own label.
pub fn summary(sample: &Sample) -> String {
    format!(
        "{:>7.0} grants/s  wait p50 {:>7.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  failed/grant {:>6.2}  Jain {:.3}",
        sample.grants_per_s,
        sample.p50_ms,
        sample.p99_ms,
        sample.max_ms,
        sample.failed_per_grant,
        sample.jain
    )
}

/// The tallies of one run as one sample: grants/s within the window, the waits' spread
/// (an HdrHistogram of every wait), failed attempts per grant and Jain's index over the
/// per-client grants.
pub fn reduce(tallies: &[Tally], duration_ms: u64) -> io::Result<Sample> {
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
