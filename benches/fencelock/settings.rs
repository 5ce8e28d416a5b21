//! Command-line settings of a benchmark run: the full run (`make bench`) or the short
//! smoke CI runs (`--smoke`), repetitions, where reports go, whether the docs are
//! updated and whether server and load generator are pinned to separate CPUs.

use std::path::{Path, PathBuf};

pub const USAGE: &str = "usage: cargo bench --bench fencelock -- [--smoke] [--docs] [--reps N] [--out DIR] [--no-pin] [--only LIST]
  --smoke   a few seconds instead of minutes (CI); reports go to target/bench/smoke
  --docs    also write docs/bench.svg and the figures block of README.md
  --reps N  repetitions of every measurement (at least 3; default 3)
  --out DIR report directory (default target/bench)
  --no-pin  do not pin redis-server and the load generator to separate CPUs
  --only    comma-separated scenarios to run: throughput, contention, memory (default all)";

/// The scenarios a run can include.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Per-command throughput and the lock cycle.
    Throughput,
    Contention,
    Memory,
}

impl Scenario {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "throughput" => Some(Self::Throughput),
            "contention" => Some(Self::Contention),
            "memory" => Some(Self::Memory),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub smoke: bool,
    pub docs: bool,
    pub pin: bool,
    pub repetitions: usize,
    pub connections: usize,
    pub depth: usize,
    /// Commands each connection sends in one pipelined run (split into operations).
    pub pipelined_commands: u64,
    /// Commands each connection sends in one unpipelined run.
    pub unpipelined_commands: u64,
    /// Length of one contention run.
    pub contention_ms: u64,
    pub contention_clients: Vec<usize>,
    pub memory_locks: u64,
    pub out_dir: PathBuf,
    pub scenarios: Vec<Scenario>,
}

impl Settings {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut settings = Self {
            smoke: false,
            docs: false,
            pin: true,
            repetitions: 3,
            connections: 50,
            depth: 32,
            pipelined_commands: 16_000,
            unpipelined_commands: 1_200,
            contention_ms: 5_000,
            contention_clients: vec![4, 32],
            memory_locks: 100_000,
            out_dir: root.join("target/bench"),
            scenarios: vec![Scenario::Throughput, Scenario::Contention, Scenario::Memory],
        };
        let mut out_dir = None;
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                // cargo passes --bench to every bench target.
                "--bench" => {}
                "--smoke" => settings.smoke = true,
                "--docs" => settings.docs = true,
                "--no-pin" => settings.pin = false,
                "--reps" => {
                    let value = args.next().ok_or("--reps needs a number")?;
                    settings.repetitions = value
                        .parse()
                        .ok()
                        .filter(|&n| n >= 3)
                        .ok_or("--reps must be a number, at least 3")?;
                }
                "--only" => {
                    let list = args.next().ok_or("--only needs a list")?;
                    settings.scenarios = list
                        .split(',')
                        .map(|name| {
                            Scenario::parse(name.trim())
                                .ok_or_else(|| format!("unknown scenario {name:?}\n{USAGE}"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--out" => out_dir = Some(PathBuf::from(args.next().ok_or("--out needs a path")?)),
                "--help" | "-h" => return Err(USAGE.into()),
                other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        if settings.smoke {
            settings.pipelined_commands = 320;
            settings.unpipelined_commands = 20;
            settings.contention_ms = 200;
            settings.memory_locks = 50_000;
            settings.out_dir = settings.out_dir.join("smoke");
        }
        if let Some(dir) = out_dir {
            settings.out_dir = dir;
        }
        if settings.smoke && settings.docs {
            return Err("--docs takes figures from a full run only, not --smoke".into());
        }
        if settings.docs && settings.scenarios.len() < 3 {
            return Err("--docs takes figures from a run of every scenario, not --only".into());
        }
        Ok(settings)
    }

    pub fn runs(&self, scenario: Scenario) -> bool {
        self.scenarios.contains(&scenario)
    }
}
