//! `make bench`: fencelock against the Lua-and-polling lock pattern, the server's own
//! Lua-free owner checks where it has them and the floor module (`bench/floor`: the
//! same key work and nothing else), side by side, in one run. Starts its own server
//! with the module and the floor module (persistence off, through `testkit`; Redis
//! 7.0, Redis 8.2 or Valkey 9.1), measures per-command throughput, the lock cycle,
//! contention on one key, memory, where the server's time goes per command, how
//! that cost grows with holders, waiters and held locks (the cost curves, on servers of
//! their own), what sessions cost (`LOCK.KEEPALIVE` against pipelined refreshes,
//! memory per session holding), many keys at once (`LOCK.ACQUIREALL` against
//! pipelined acquires and a client-side multi-lock, and what deadlock detection adds to
//! an acquire that waits) and leader election (`LOCK.OBSERVE` against `PUBLISH` and
//! `SUBSCRIBE`, `LOCK.PROCLAIM`, `LOCK.ACQUIRE … VALUE`, memory per blocked observer),
//! with every comparison alternating within each repetition,
//! then prints a table and writes `report.json`, `report.md`, `bench.svg` and
//! `curves.svg` (see `--help`); with `--docs` (`make bench-docs`) also docs/performance.md,
//! docs/bench.svg and docs/curves.svg. With the `peers` feature (`make bench-peers`)
//! it also runs fencelock side by side with etcd.
//!
//! The same binary is also the contention client: `contender …` (re-executed by the
//! contention scenario, one process per client) and `multikey-contender …` (the same for
//! the contention over sets of keys), and `make bench-all`'s combiner:
//! `combine OUT.md DIR…` (one table out of several servers' `report.json`). Built
//! with the `peers` feature (`make bench-peers`: fencelock side by side with etcd), it
//! is also that scenario's etcd contention client (`etcd-contender …`) and the lock
//! holder it kills (`peer-holder …`).
//!
//! `measure/` talks to the servers and produces the `results::Results` of a run;
//! `report/` makes every table, chart and file from them and from nothing else. Neither
//! imports the other: `results` (with the types of report.json) is what they share, and
//! `settings` (the command line) and `stats` stand below all three.

mod measure;
mod report;
mod results;
mod settings;
mod stats;

use std::process::ExitCode;

use measure::contention;
use report::combine;
use settings::Settings;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let subcommand = match args.first().map(String::as_str) {
        Some("contender") => Some(("contender", contention::client::main(&args[1..]))),
        Some("combine") => Some(("combine", combine::main(&args[1..]))),
        Some("multikey-contender") => Some((
            "multikey-contender",
            measure::acquireall::client::main(&args[1..]),
        )),
        #[cfg(feature = "peers")]
        Some("etcd-contender") => Some((
            "etcd-contender",
            measure::peers::contended_lock::main(&args[1..]),
        )),
        #[cfg(feature = "peers")]
        Some("peer-holder") => Some(("peer-holder", measure::peers::takeover::main(&args[1..]))),
        _ => None,
    };
    if let Some((name, outcome)) = subcommand {
        return match outcome {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("{name}: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match Settings::parse(&args) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let run = measure::run(&settings)
        .and_then(|results| report::publish(results, &settings.out_dir, settings.docs));
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fencelock bench failed: {error}");
            ExitCode::FAILURE
        }
    }
}
