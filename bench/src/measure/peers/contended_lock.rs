//! Row 2 of the etcd side by side: one lock, 4 and 32 clients, each its own process,
//! each looping as in scenario 3 — think 0–2 ms, ask, hold 0.5 ms, release — with the
//! wait done by the server: fencelock's `LOCK.ACQUIRE … BLOCK` (scenario 3's own
//! `contender`, on either fencelock server), etcd's `Lock` RPC, which returns once the
//! caller's key has the lowest create revision under the lock's name. The etcd client
//! is `etcd-contender` below, the bench binary re-executed, speaking the `contender`
//! protocol (`ready`, `go <ms>`, one JSON `Tally` line); `contention::processes`
//! starts both kinds and gathers their tallies into the contention scenario's `Sample`.

use std::io::{self, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use crate::measure::contention::client::{ready_then_go, Tally};
use crate::measure::contention::{client, processes};
use crate::measure::peers::etcd::{self, connect};
use crate::results::contention::{Lock, Mode, Sample};

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

/// The contender subcommand for one client of `target`.
fn command(target: &Target, index: usize) -> io::Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    match target {
        Target::Fencelock { port } => command
            .arg("contender")
            .arg(port.to_string())
            .arg(index.to_string())
            .args(client::args(Lock::Mutex, Mode::Block)),
        Target::Etcd { url, name } => command
            .arg("etcd-contender")
            .arg(url)
            .arg(name)
            .arg(index.to_string()),
    };
    Ok(command)
}

/// Runs `clients` contenders against `target` for `duration_ms`.
pub fn run_once(target: &Target, clients: usize, duration_ms: u64) -> io::Result<Sample> {
    let commands = (0..clients)
        .map(|index| command(target, index))
        .collect::<io::Result<Vec<_>>>()?;
    processes::reduce(&processes::run(commands, duration_ms)?, duration_ms)
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
    let duration_ms = ready_then_go()?;
    let tally = runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_millis(duration_ms);
        let mut tally = Tally::default();
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
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "{report}")?;
    stdout.flush()
}
