//! `make bench`: fencelock against the Lua-and-polling lock pattern and the server's
//! own Lua-free owner checks where it has them, side by side, in one run. Starts its
//! own server with the module (persistence off, through `testkit`; Redis 7.0, Redis
//! 8.2 or Valkey 9.1), measures per-command throughput, the lock cycle, contention on
//! one key, memory and where the server's time goes per command, with every comparison
//! alternating within each repetition, then prints a table and writes `report.json`,
//! `report.md` and `bench.svg` (see `--help`); with `--docs` (`make bench-docs`) also
//! docs/performance.md and docs/bench.svg.
//!
//! The same binary is also the contention client: `contender …` (re-executed by the
//! contention scenario, one process per client), and `make bench-all`'s combiner:
//! `combine OUT.md DIR…` (one table out of several servers' `report.json`).

mod measure;
mod report;
mod results;
mod settings;
mod stats;

use std::io;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use measure::{contender, contention, machine, memory, natives, profile, server, throughput};
use report::{combine, docs, json, svg, targets, text};
use results::Results;
use settings::{Scenario, Settings};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let subcommand = match args.first().map(String::as_str) {
        Some("contender") => Some(("contender", contender::main(&args[1..]))),
        Some("combine") => Some(("combine", combine::main(&args[1..]))),
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
    match run(&settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fencelock bench failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(settings: &Settings) -> io::Result<()> {
    let placement = server::pinning_plan(settings.pin);
    if placement.is_some() {
        server::pin_self()?;
    }
    let server = server::start(placement.is_some())?;
    let mut admin = server::connect(&server)?;
    let machine = machine::describe(&mut admin, &settings.server, placement.as_deref())?;
    let natives = natives::Natives::detect(&mut admin)?;
    drop(admin);
    eprintln!("fencelock bench on {}", machine.one_line());
    eprintln!("{}", natives.describe());
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    let mut throughput = Vec::new();
    if settings.runs(Scenario::Throughput) {
        eprintln!("1+2. throughput and lock cycle");
        throughput = throughput::run(&server, settings, natives)?;
    }
    let mut contention = Vec::new();
    if settings.runs(Scenario::Contention) {
        eprintln!("3. contention");
        contention = contention::run(&server, settings)?;
    }
    let mut memory = memory::MemoryResult::default();
    if settings.runs(Scenario::Memory) {
        eprintln!("4. memory");
        memory = memory::run(&server, settings.memory_locks, settings.repetitions)?;
    }
    let mut profile = profile::ProfileResult::default();
    if settings.runs(Scenario::Profile) {
        eprintln!("5. where the time goes");
        profile = profile::run(&server, settings, natives)?;
    }
    drop(server);

    let results = Results {
        machine,
        settings: settings.clone(),
        started_unix,
        elapsed_s: started.elapsed().as_secs_f64(),
        throughput,
        contention,
        memory,
        natives,
        profile,
    };
    let targets = targets::evaluate(&results);
    let tables = text::tables(&results, &targets);
    println!("{}", text::text(&results, &tables));

    std::fs::create_dir_all(&settings.out_dir)?;
    let json = serde_json::to_string_pretty(&json::report(&results, &targets))
        .map_err(|e| io::Error::other(format!("report.json: {e}")))?;
    std::fs::write(settings.out_dir.join("report.json"), json + "\n")?;
    std::fs::write(
        settings.out_dir.join("report.md"),
        text::markdown(&results, &tables, docs::CHART_LINK),
    )?;
    let chart = svg::chart(&results)?;
    std::fs::write(settings.out_dir.join("bench.svg"), &chart)?;
    eprintln!(
        "wrote report.json, report.md and bench.svg in {}",
        settings.out_dir.display()
    );
    if settings.docs {
        docs::publish(&chart, &text::markdown(&results, &tables, docs::CHART_LINK))?;
    }
    Ok(())
}
