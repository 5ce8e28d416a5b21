//! The report's page: the run's main tables and then every section, described once and
//! printed on stdout and written as `report.md` (whose text also becomes the figures of
//! docs/performance.md). Markdown opens with the verdict and the targets; the terminal
//! ends with the targets, where the reader's eye is when the run finishes.

use crate::report::common::{
    comparisons, fixed, sample_cells, spread_with, target_table, Table, SAMPLE_HEADERS,
};
use crate::report::section::{Format, Section};
use crate::report::{acquireall, election, sessions};
use crate::results::profile::PerCommand;
use crate::results::{Results, Target};
use crate::stats::spread;

/// Per-command costs on the server, module commands next to what they replace.
fn profile(results: &Results) -> Table {
    let mut table = Table::new(&[
        "command",
        "instructions/command",
        "allocations/command",
        "server CPU µs/command",
        "request bytes",
        "reply bytes",
    ]);
    for row in &results.profile.rows {
        let counts = |f: fn(&PerCommand) -> f64, decimals| {
            row.counts
                .as_ref()
                .map_or("n/a".to_string(), |c| fixed(decimals)(f(c)))
        };
        table.row(vec![
            row.label.clone(),
            counts(|c| c.instructions, 0),
            counts(|c| c.allocations, 2),
            fixed(2)(row.cpu_us),
            fixed(1)(row.bytes_in),
            fixed(1)(row.bytes_out),
        ]);
    }
    table
}

fn throughput(results: &Results) -> Table {
    comparisons(&results.throughput, false)
}

fn contention(results: &Results) -> Table {
    let mut table = Table::new(&[&["lock", "clients", "mechanism"][..], &SAMPLE_HEADERS].concat());
    for entry in &results.contention {
        let mut row = vec![
            entry.lock.label(),
            entry.clients.to_string(),
            entry.mode.label(),
        ];
        row.extend(sample_cells(&entry.samples));
        table.row(row);
    }
    table
}

fn memory(results: &Results) -> Table {
    let m = &results.memory;
    let mut table = Table::new(&["memory", "bytes: median [min–max]"]);
    let rows = [
        (
            "per held lock: fencelock (32-char server token)",
            &m.fencelock_held,
        ),
        (
            "per held lock: floor module (the same holding, nothing else)",
            &m.floor_held,
        ),
        ("per held lock: SET NX PX (22-char token)", &m.set_held),
        (
            "per held lock: SET NX PX + its fence: key",
            &m.set_with_fence_held,
        ),
        ("left per released lock name: fencelock", &m.fencelock_left),
        ("left per released lock name: floor module", &m.floor_left),
        (
            "left per released lock name: Lua pattern (fence: key)",
            &m.lua_left,
        ),
    ];
    for (what, samples) in rows {
        table.row(vec![
            what.to_string(),
            spread_with(spread(samples), fixed(1)),
        ]);
    }
    table
}

fn run_description(results: &Results) -> String {
    let s = &results.workload;
    format!(
        "{} run, {} repetitions (alternating order), {} connections, pipeline {} deep and unpipelined; \
         {} / {} commands per connection per pipelined / unpipelined run; contention runs of {} ms; \
         memory over {} locks; {:.0} s in all.",
        if s.smoke { "Smoke" } else { "Full" },
        s.repetitions,
        s.connections,
        s.depth,
        s.pipelined_commands,
        s.unpipelined_commands,
        s.contention_ms,
        results.memory.locks,
        results.elapsed_s
    )
}

/// How much of each throughput run the server's event loop was on a CPU: near 100%
/// means the server, not the load generator or a neighbour, set the pace.
fn busy_note(results: &Results) -> String {
    let shares: Vec<f64> = results
        .throughput
        .iter()
        .flat_map(|g| g.series.iter().flat_map(|s| s.server_busy.iter().copied()))
        .collect();
    if shares.is_empty() {
        return String::new();
    }
    let s = spread(&shares);
    format!(
        "Server event loop on-CPU during throughput runs: median {:.0}%, min {:.0}% \
         (a run below 85% — another process took the CPU — is run again, up to 3 times).",
        s.median * 100.0,
        s.min * 100.0
    )
}

/// Where the profile's counts came from, or why there are none.
fn profile_note(results: &Results) -> String {
    let p = &results.profile;
    match &p.without_callgrind {
        _ if p.rows.is_empty() => String::new(),
        Some(why) => format!(
            "Per command, 50 connections 32 deep, hit path; connection set-up taken off. \
             No instruction or allocation counts ({why})."
        ),
        None => "Per command, 50 connections 32 deep, hit path; connection set-up taken off. \
                 Instructions and allocator calls (jemalloc's or libc's malloc, calloc, realloc) \
                 of the whole server under callgrind over 10,000 commands; CPU time of the \
                 event loop and bytes on the wire on the benchmark's own server."
            .to_string(),
    }
}

/// The verdict markdown opens with: every target met, or the misses by name.
fn verdict(targets: &[Target]) -> String {
    let missed: Vec<&str> = targets
        .iter()
        .filter(|t| t.met == Some(false))
        .map(|t| t.name.as_str())
        .collect();
    if missed.is_empty() {
        "All targets met in this run.".to_string()
    } else {
        format!("Targets missed in this run: {}.", missed.join("; "))
    }
}

/// The page; `chart` is the path the SVG is linked under in markdown.
pub fn page(results: &Results, targets: &[Target], chart: &str) -> Section {
    let natives = format!("Server has {}.", results.natives.describe());
    let targets_table = target_table(targets);
    Section::new()
        .only(
            Format::Markdown,
            Section::new()
                .note(format!("Machine: {}.", results.machine.one_line()))
                .note(format!(
                    "{} {} {natives}",
                    run_description(results),
                    busy_note(results)
                ))
                .note(verdict(targets))
                .image("throughput ratios and wait-time distribution", chart)
                .title("Targets", "")
                .targets(targets_table.clone()),
        )
        .only(
            Format::Text,
            Section::new()
                .gap()
                .title(
                    "",
                    format!("fencelock benchmark — {}", results.machine.one_line()),
                )
                .note(run_description(results))
                .note(busy_note(results))
                .note(natives)
                .gap(),
        )
        .title(
            "Throughput (median [min–max] over repetitions)",
            "THROUGHPUT",
        )
        .table(throughput(results))
        .title("Contention: one key, think 0–2 ms, hold 0.5 ms", "CONTENTION")
        .only(
            Format::Markdown,
            Section::new().note(
                "Polling is `SET NX PX` for the mutex, the ZSET semaphore script for the semaphore.",
            ),
        )
        .table(contention(results))
        .title("Memory", "MEMORY")
        .table(memory(results))
        .title("Per command on the server", "PER COMMAND ON THE SERVER")
        .note(profile_note(results))
        .table(profile(results))
        .only(Format::Text, Section::new().gap())
        .title("Sessions", "SESSIONS")
        .section(sessions::section(results.sessions.as_ref()))
        .title(
            "Many keys at once (LOCK.ACQUIREALL)",
            "MANY KEYS AT ONCE (LOCK.ACQUIREALL)",
        )
        .section(acquireall::section(results.acquireall.as_ref()))
        .title(
            "Leader election (LOCK.OBSERVE, LOCK.PROCLAIM, VALUE)",
            "LEADER ELECTION (LOCK.OBSERVE, LOCK.PROCLAIM, VALUE)",
        )
        .section(election::section(results.election.as_ref()))
        .only(
            Format::Text,
            Section::new().title("", "TARGETS").targets(targets_table),
        )
}
