//! Command-line settings of a benchmark run: the full run (`make bench`) or the short
//! smoke CI runs (`--smoke`), repetitions, which server it is (the name `make bench
//! SERVER=…` gives it; the binary itself comes from `FENCELOCK_REDIS_SERVER`), where
//! reports go, whether the docs are updated (`make bench-docs`) and whether server and
//! load generator are pinned to separate CPUs. Parsed with `lexopt`. The part that
//! says how much the scenarios do is the results' `Workload`, which every report
//! states.

use std::path::PathBuf;

use lexopt::prelude::*;

use crate::results::Workload;

pub const USAGE: &str = "usage: cargo run --release -p fencelock-bench -- [--smoke] [--docs] [--reps N] [--out DIR] [--no-pin] [--only LIST] [--server NAME]
       cargo run --release -p fencelock-bench -- combine OUT.md DIR...
  --smoke   a few seconds instead of minutes (CI); reports go to target/bench/smoke
  --docs    also write docs/bench.svg and docs/performance.md
  --reps N  repetitions of every measurement (at least 3; default 3)
  --out DIR report directory (default target/bench)
  --no-pin  do not pin redis-server and the load generator to separate CPUs
  --only    comma-separated scenarios to run: throughput, contention, memory, profile,
            curves, sessions, acquireall (LOCK.ACQUIREALL and deadlock detection),
            election (LOCK.OBSERVE, LOCK.PROCLAIM, VALUE), peers
            (etcd side by side; built with the `peers` feature only: make bench-peers)
            (default all those built in)
  --server  the name the report gives the server (default: the binary's path); the
            binary is FENCELOCK_REDIS_SERVER's, else redis-server from PATH
  The modules loaded are FENCELOCK_MODULE and FENCELOCK_FLOOR_MODULE, else the release
  builds target/release/libfencelock.so and libfencelock_floor.so (make build)
  combine   one markdown table out of the report.json of several runs (make bench-all)";

/// The scenarios a run can include.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Per-command throughput and the lock cycle.
    Throughput,
    Contention,
    Memory,
    /// Where the time goes: instructions, CPU time, allocations and bytes per command.
    Profile,
    /// fencelock side by side with etcd's lock API (feature `peers`).
    #[cfg(feature = "peers")]
    Peers,
    /// Server CPU per command as holders, waiters and held locks grow.
    Curves,
    /// `LOCK.KEEPALIVE` against pipelined refreshes, and memory per session holding.
    Sessions,
    /// `LOCK.ACQUIREALL` against pipelined acquires and a client-side multi-lock, and
    /// what deadlock detection adds to an acquire that waits.
    AcquireAll,
    /// Leader election with a public value: `LOCK.OBSERVE` against `PUBLISH` and
    /// `SUBSCRIBE`, `LOCK.PROCLAIM` and `LOCK.ACQUIRE … VALUE` throughput, memory per
    /// blocked observer.
    Election,
}

/// The command line: what the run measures (`workload`, which the report states) and
/// where it runs and writes.
#[derive(Debug, Clone)]
pub struct Settings {
    pub docs: bool,
    pub pin: bool,
    /// The name of the server under test, for the report.
    pub server: String,
    pub out_dir: PathBuf,
    pub scenarios: Vec<Scenario>,
    pub workload: Workload,
}

fn scenario(name: &str) -> Result<Scenario, String> {
    match name.trim() {
        "throughput" => Ok(Scenario::Throughput),
        "contention" => Ok(Scenario::Contention),
        "memory" => Ok(Scenario::Memory),
        "profile" => Ok(Scenario::Profile),
        #[cfg(feature = "peers")]
        "peers" => Ok(Scenario::Peers),
        #[cfg(not(feature = "peers"))]
        "peers" => Err(
            "peers: this build has no etcd client (feature `peers`): run `make bench-peers`".into(),
        ),
        "curves" => Ok(Scenario::Curves),
        "sessions" => Ok(Scenario::Sessions),
        "acquireall" => Ok(Scenario::AcquireAll),
        "election" => Ok(Scenario::Election),
        _ => Err(format!("unknown scenario {name:?}\n{USAGE}")),
    }
}

impl Settings {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        // Reports go under the repository's target/, beside the builds.
        let root = testkit::paths::workspace_root();
        let mut settings = Self {
            docs: false,
            pin: true,
            server: testkit::server_binary(),
            out_dir: root.join("target/bench"),
            scenarios: vec![
                Scenario::Throughput,
                Scenario::Contention,
                Scenario::Memory,
                Scenario::Profile,
                #[cfg(feature = "peers")]
                Scenario::Peers,
                Scenario::Curves,
                Scenario::Sessions,
                Scenario::AcquireAll,
                Scenario::Election,
            ],
            workload: Workload {
                smoke: false,
                repetitions: 3,
                connections: 50,
                depth: 32,
                pipelined_commands: 16_000,
                unpipelined_commands: 1_200,
                contention_ms: 5_000,
                contention_clients: vec![4, 32],
                semaphore_clients: vec![32],
                semaphore_limit: 4,
                memory_locks: 100_000,
                profile_commands: 4_000,
            },
        };
        let every_scenario = settings.scenarios.len();
        let mut out_dir = None;
        let mut parser = lexopt::Parser::from_args(args);
        while let Some(arg) = parser.next().map_err(|e| format!("{e}\n{USAGE}"))? {
            match arg {
                Long("smoke") => settings.workload.smoke = true,
                Long("docs") => settings.docs = true,
                Long("no-pin") => settings.pin = false,
                Long("reps") => {
                    let value = parser.value().map_err(|_| "--reps needs a number")?;
                    settings.workload.repetitions = value
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n >= 3)
                        .ok_or("--reps must be a number, at least 3")?;
                }
                Long("only") => {
                    let list = parser.value().map_err(|_| "--only needs a list")?;
                    settings.scenarios = list
                        .to_string_lossy()
                        .split(',')
                        .map(scenario)
                        .collect::<Result<_, _>>()?;
                }
                Long("server") => {
                    settings.server = parser
                        .value()
                        .map_err(|_| "--server needs a name")?
                        .to_string_lossy()
                        .into_owned();
                }
                Long("out") => {
                    out_dir = Some(PathBuf::from(
                        parser.value().map_err(|_| "--out needs a path")?,
                    ))
                }
                Long("help") | Short('h') => return Err(USAGE.into()),
                Long(name) => return Err(format!("unknown argument \"--{name}\"\n{USAGE}")),
                Short(c) => return Err(format!("unknown argument \"-{c}\"\n{USAGE}")),
                Value(other) => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        if settings.workload.smoke {
            let workload = &mut settings.workload;
            workload.pipelined_commands = 320;
            workload.unpipelined_commands = 20;
            workload.contention_ms = 200;
            workload.memory_locks = 50_000;
            workload.profile_commands = 200;
            settings.out_dir = settings.out_dir.join("smoke");
        }
        if let Some(dir) = out_dir {
            settings.out_dir = dir;
        }
        if settings.workload.smoke && settings.docs {
            return Err("--docs takes figures from a full run only, not --smoke".into());
        }
        if settings.docs && settings.scenarios.len() < every_scenario {
            return Err("--docs takes figures from a run of every scenario, not --only".into());
        }
        Ok(settings)
    }

    pub fn runs(&self, scenario: Scenario) -> bool {
        self.scenarios.contains(&scenario)
    }
}
