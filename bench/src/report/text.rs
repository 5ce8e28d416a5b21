//! The human-readable report: the same tables printed on stdout and written as
//! `report.md` (whose text also becomes the figures of docs/performance.md).

use crate::report::table::{self, fixed, ms, rate, spread_with, Table};
use crate::report::{acquireall, election, sessions};
use crate::results::contention::Sample;
use crate::results::profile::PerCommand;
use crate::results::throughput::GroupResult;
use crate::results::{group_ratios, Results, Target};
use crate::stats::spread;

pub struct Tables {
    pub throughput: Table,
    pub targets: Table,
    pub contention: Table,
    pub memory: Table,
    pub profile: Table,
}

pub fn tables(results: &Results, targets: &[Target]) -> Tables {
    Tables {
        throughput: throughput(results),
        targets: target_table(targets),
        contention: contention(results),
        memory: memory(results),
        profile: profile(results),
    }
}

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

pub fn throughput(results: &Results) -> Table {
    comparisons(&results.throughput, false)
}

/// One row per (comparison, mode, baseline): fencelock's rate, the baseline's, their
/// ratio; with `each`, also the ratio of every repetition.
pub fn comparisons(groups: &[GroupResult], each: bool) -> Table {
    let mut headers = vec!["comparison", "mode", "fencelock", "baseline", "ratio"];
    if each {
        headers.push("ratio in each repetition");
    }
    let mut table = Table::new(&headers);
    let ratios = group_ratios(groups);
    for group in groups {
        let Some((ours, baselines)) = group.series.split_first() else {
            continue;
        };
        for baseline in baselines {
            let Some(ratio) = ratios.iter().find(|r| {
                r.group == group.id && r.depth == group.depth && r.baseline == baseline.label
            }) else {
                continue;
            };
            let mut row = vec![
                format!("{} ({})", group.title, group.unit),
                ratio.mode().to_string(),
                format!(
                    "{} {}",
                    ours.label,
                    spread_with(spread(&ours.samples), rate)
                ),
                format!(
                    "{} {}",
                    baseline.label,
                    spread_with(spread(&baseline.samples), rate)
                ),
                spread_with(ratio.spread(), |x| format!("{x:.2}×")),
            ];
            if each {
                row.push(table::each(&ratio.samples));
            }
            table.row(row);
        }
    }
    table
}

pub fn target_table(targets: &[Target]) -> Table {
    let mut table = Table::new(&["target", "wanted", "measured: median [min–max]", "result"]);
    for t in targets {
        table.row(vec![
            t.name.clone(),
            t.wanted.clone(),
            if t.met.is_some() {
                format!("{}{}", spread_with(t.measured, fixed(t.decimals)), t.unit)
            } else {
                "—".to_string()
            },
            match t.met {
                Some(true) => "met",
                Some(false) => "**MISSED**",
                // Not in this run's scenarios, or the server lacks the baseline.
                None => "n/a",
            }
            .to_string(),
        ]);
    }
    table
}

fn contention(results: &Results) -> Table {
    let mut table = Table::new(&[
        "lock",
        "clients",
        "mechanism",
        "grants/s",
        "wait p50 ms",
        "wait p99 ms",
        "wait max ms",
        "failed attempts/grant",
        "Jain",
    ]);
    for entry in &results.contention {
        let column =
            |f: fn(&Sample) -> f64| spread(&entry.samples.iter().map(f).collect::<Vec<_>>());
        table.row(vec![
            entry.lock.label(),
            entry.clients.to_string(),
            entry.mode.label(),
            spread_with(column(|s| s.grants_per_s), fixed(0)),
            spread_with(column(|s| s.p50_ms), ms),
            spread_with(column(|s| s.p99_ms), ms),
            spread_with(column(|s| s.max_ms), ms),
            spread_with(column(|s| s.failed_per_grant), fixed(2)),
            spread_with(column(|s| s.jain), fixed(3)),
        ]);
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

/// Markdown report; `chart` is the path the SVG is linked under.
pub fn markdown(results: &Results, tables: &Tables, chart: &str) -> String {
    let missed: Vec<&str> = tables
        .targets
        .rows
        .iter()
        .filter(|row| row.last().is_some_and(|r| r.contains("MISSED")))
        .filter_map(|row| row.first().map(String::as_str))
        .collect();
    let verdict = if missed.is_empty() {
        "All targets met in this run.".to_string()
    } else {
        format!("Targets missed in this run: {}.", missed.join("; "))
    };
    format!(
        "Machine: {}.\n\n{} {} Server has {}.\n\n{}\n\n![throughput ratios and wait-time distribution]({chart})\n\n\
         ### Targets\n\n{}\n### Throughput (median [min–max] over repetitions)\n\n{}\n\
         ### Contention: one key, think 0–2 ms, hold 0.5 ms\n\nPolling is `SET NX PX` for the mutex, \
         the ZSET semaphore script for the semaphore.\n\n{}\n### Memory\n\n{}\n\
         ### Per command on the server\n\n{}\n\n{}\n### Sessions\n\n{}\n### Many keys at once (LOCK.ACQUIREALL)\n\n{}\n### Leader election (LOCK.OBSERVE, LOCK.PROCLAIM, VALUE)\n\n{}",
        results.machine.one_line(),
        run_description(results),
        busy_note(results),
        results.natives.describe(),
        verdict,
        tables.targets.markdown(),
        tables.throughput.markdown(),
        tables.contention.markdown(),
        tables.memory.markdown(),
        profile_note(results),
        tables.profile.markdown(),
        sessions::markdown(results.sessions.as_ref()),
        acquireall::markdown(results.acquireall.as_ref()),
        election::markdown(results.election.as_ref()),
    )
}

/// The stdout version.
pub fn text(results: &Results, tables: &Tables) -> String {
    format!(
        "\nfencelock benchmark — {}\n{}\n{}\nServer has {}.\n\nTHROUGHPUT\n{}\nCONTENTION\n{}\nMEMORY\n{}\nPER COMMAND ON THE SERVER\n{}\n{}\n\nSESSIONS\n{}\nMANY KEYS AT ONCE (LOCK.ACQUIREALL)\n{}\nLEADER ELECTION (LOCK.OBSERVE, LOCK.PROCLAIM, VALUE)\n{}\nTARGETS\n{}",
        results.machine.one_line(),
        run_description(results),
        busy_note(results),
        results.natives.describe(),
        tables.throughput.text(),
        tables.contention.text(),
        tables.memory.text(),
        profile_note(results),
        tables.profile.text(),
        sessions::text(results.sessions.as_ref()),
        acquireall::text(results.acquireall.as_ref()),
        election::text(results.election.as_ref()),
        tables.targets.text().replace("**MISSED**", "MISSED"),
    )
}
