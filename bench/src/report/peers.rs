//! The etcd side by side in the reports (`make bench-peers`; not one of the numbered
//! scenarios): its targets, its three tables (lock cycle, contention, holder's death)
//! with each fencelock variant's ratio to etcd taken per repetition, one section shown
//! on stdout and in report.md and the `{{peers}}` place of docs/performance.md. A run without these
//! results prints nothing of them and gives the page a line saying how to get them.

use crate::report::common::{fixed, ms, rate, spread_with, target, target_table, Table, Want};
use crate::report::section::{Format, Section};
use crate::results::peers::{CycleSample, PeersResult, System, TakeoverSample, SYSTEMS};
use crate::results::{Results, Target};
use crate::stats::{spread, Spread};

/// Every target name here starts with this, which is how the section finds its own.
const PREFIX: &str = "etcd side by side";

/// What the page says where the figures would be, in a run without them.
pub const NOT_MEASURED: &str =
    "Not measured in this run: run `make bench-peers` (`make bench-docs` includes it).";

fn shape(clients: usize, depth: usize) -> String {
    let clients = if clients == 1 {
        "1 client".to_string()
    } else {
        format!("{clients} clients")
    };
    if depth == 1 {
        clients
    } else {
        format!("{clients} × {depth} in flight")
    }
}

pub fn targets(results: &Results) -> Vec<Target> {
    let Some(peers) = &results.peers else {
        return Vec::new();
    };
    let mut targets = Vec::new();
    let name = |what: String| format!("{PREFIX}: {what}");
    for row in &peers.cycles {
        let (clients, depth) = (row.clients, row.depth);
        let rate_ratio =
            |system| peers.cycle_ratio(clients, depth, system, System::Etcd, |s| s.cycles_per_s);
        targets.push(target(
            name(format!(
                "lock cycle, {}: fencelock ÷ etcd cycles/s",
                shape(clients, depth)
            )),
            Want::AtLeast(10.0),
            "×",
            rate_ratio(System::Fencelock),
        ));
        if clients == 1 {
            targets.push(target(
                name("lock cycle, 1 client: cycle p99 of etcd ÷ fencelock".into()),
                Want::AtLeast(10.0),
                "×",
                peers.cycle_ratio(1, 1, System::Etcd, System::Fencelock, |s| s.p99_ms),
            ));
        }
        targets.push(target(
            name(format!(
                "lock cycle, {}: fencelock with AOF always ÷ etcd cycles/s",
                shape(clients, depth)
            )),
            Want::AtLeast(1.0),
            "×",
            rate_ratio(System::FencelockAof),
        ));
        if clients == 1 {
            targets.push(target(
                name("lock cycle, 1 client: cycle p99 of etcd ÷ fencelock with AOF always".into()),
                Want::AtLeast(1.0),
                "×",
                peers.cycle_ratio(1, 1, System::Etcd, System::FencelockAof, |s| s.p99_ms),
            ));
        }
    }
    for row in &peers.contention {
        let clients = row.clients;
        targets.push(target(
            name(format!(
                "contention, {clients} clients: wait p99 of etcd ÷ fencelock BLOCK"
            )),
            Want::AtLeast(1.0),
            "×",
            peers.contention_ratio(clients, System::Etcd, System::Fencelock, |s| s.p99_ms),
        ));
        targets.push(target(
            name(format!(
                "contention, {clients} clients: grants/s of fencelock BLOCK ÷ etcd"
            )),
            Want::AtLeast(1.0),
            "×",
            peers.contention_ratio(clients, System::Fencelock, System::Etcd, |s| s.grants_per_s),
        ));
        targets.push(target(
            name(format!(
                "contention, {clients} clients: Jain's index of fencelock BLOCK"
            )),
            Want::AtLeast(0.99),
            "",
            peers
                .contended(clients, System::Fencelock)
                .map(|s| s.samples.iter().map(|s| s.jain).collect()),
        ));
    }
    targets.push(target(
        name("holder's death: fencelock's next grant past the lease end".into()),
        Want::AtMost(50.0),
        " ms",
        peers
            .takeover(System::Fencelock)
            .map(|s| s.samples.iter().map(|s| s.past_lease_end_ms).collect()),
    ));
    targets.push(target(
        name("holder's death: kill → next grant, etcd ÷ fencelock".into()),
        Want::AtLeast(1.0),
        "×",
        peers.takeover_ratio(System::Etcd, System::Fencelock, |s| s.kill_to_grant_ms),
    ));
    targets
}

/// `median [min–max]×`, or a dash where there is no ratio (etcd's own row).
fn ratio(samples: Option<Vec<f64>>) -> String {
    samples.map_or("—".into(), |s| {
        spread_with(spread(&s), |x| format!("{x:.2}×"))
    })
}

fn percent(s: Spread) -> String {
    spread_with(s, |x| {
        if x.is_finite() {
            format!("{:.0}%", x * 100.0)
        } else {
            "n/a".into()
        }
    })
}

fn column<T>(samples: &[T], f: impl Fn(&T) -> f64) -> Spread {
    spread(&samples.iter().map(f).collect::<Vec<_>>())
}

fn cycles(peers: &PeersResult) -> Table {
    let mut table = Table::new(&[
        "clients",
        "system",
        "cycles/s",
        "cycle p50 ms",
        "cycle p99 ms",
        "server on-CPU",
        "load generator on-CPU",
        "cycles/s ÷ etcd",
        "p99: etcd ÷ this",
    ]);
    for row in &peers.cycles {
        for series in &row.series {
            let of_etcd = series.system != System::Etcd;
            let versus = |numerator, denominator, f: fn(&CycleSample) -> f64| {
                of_etcd
                    .then(|| peers.cycle_ratio(row.clients, row.depth, numerator, denominator, f))
                    .flatten()
            };
            let s = &series.samples;
            table.row(vec![
                shape(row.clients, row.depth),
                series.system.label().into(),
                spread_with(column(s, |x| x.cycles_per_s), rate),
                spread_with(column(s, |x| x.p50_ms), ms),
                spread_with(column(s, |x| x.p99_ms), ms),
                percent(column(s, |x| x.server_busy)),
                percent(column(s, |x| x.client_busy)),
                ratio(versus(series.system, System::Etcd, |x| x.cycles_per_s)),
                ratio(versus(System::Etcd, series.system, |x| x.p99_ms)),
            ]);
        }
    }
    table
}

fn contention(peers: &PeersResult) -> Table {
    let mut table = Table::new(&[
        "clients",
        "system",
        "waits with",
        "grants/s",
        "wait p50 ms",
        "wait p99 ms",
        "wait max ms",
        "Jain",
        "grants/s ÷ etcd",
        "wait p99: etcd ÷ this",
    ]);
    for row in &peers.contention {
        for series in &row.series {
            let of_etcd = series.system != System::Etcd;
            let s = &series.samples;
            let grants = of_etcd
                .then(|| {
                    peers.contention_ratio(row.clients, series.system, System::Etcd, |x| {
                        x.grants_per_s
                    })
                })
                .flatten();
            let p99 = of_etcd
                .then(|| {
                    peers.contention_ratio(row.clients, System::Etcd, series.system, |x| x.p99_ms)
                })
                .flatten();
            table.row(vec![
                row.clients.to_string(),
                series.system.label().into(),
                if of_etcd { "BLOCK" } else { "Lock RPC" }.into(),
                spread_with(column(s, |x| x.grants_per_s), fixed(0)),
                spread_with(column(s, |x| x.p50_ms), ms),
                spread_with(column(s, |x| x.p99_ms), ms),
                spread_with(column(s, |x| x.max_ms), ms),
                spread_with(column(s, |x| x.jain), fixed(3)),
                ratio(grants),
                ratio(p99),
            ]);
        }
    }
    table
}

fn takeover(peers: &PeersResult) -> Table {
    let mut table = Table::new(&[
        "system",
        "lease ms",
        "kill → next grant ms",
        "next grant past the lease end ms",
        "kill → grant: etcd ÷ this",
    ]);
    for series in &peers.takeover {
        let s = &series.samples;
        let versus = (series.system != System::Etcd)
            .then(|| {
                peers.takeover_ratio(System::Etcd, series.system, |x: &TakeoverSample| {
                    x.kill_to_grant_ms
                })
            })
            .flatten();
        table.row(vec![
            series.system.label().into(),
            peers.takeover_lease_ms.to_string(),
            spread_with(column(s, |x| x.kill_to_grant_ms), fixed(1)),
            spread_with(column(s, |x| x.past_lease_end_ms), fixed(1)),
            ratio(versus),
        ]);
    }
    table
}

/// This section's targets, named without the prefix that places them in the full list.
fn own_targets(targets: &[Target]) -> Vec<Target> {
    targets
        .iter()
        .filter_map(|t| {
            let name = t.name.strip_prefix(PREFIX)?.trim_start_matches(": ");
            Some(Target {
                name: name.to_string(),
                ..t.clone()
            })
        })
        .collect()
}

fn description(results: &Results, peers: &PeersResult) -> String {
    let systems: Vec<&str> = SYSTEMS.iter().map(|s| s.label()).collect();
    // Labels hold commas and parentheses: listed with semicolons.
    format!(
        "{} (single member on loopback, default settings: every commit fsynced) against \
         fencelock on the run's server (persistence off) and on a second server with \
         `appendonly yes` and `appendfsync always`; data directories on {}. Each row runs \
         each of {} once per repetition in alternating order, {} repetitions; ratios are taken \
         within a repetition. Cycle runs of {} ms, contention runs of {} ms, takeover \
         leases of {} ms. Placement: {}; {}. Load \
         average {:.2} when the scenario started, {:.2} when it ended.",
        peers.etcd,
        peers.filesystem,
        systems.join("; "),
        results.workload.repetitions,
        peers.cycle_ms,
        peers.contention_ms,
        peers.takeover_lease_ms,
        results.machine.placement,
        peers.placement,
        peers.load_before,
        peers.load_after,
    )
}

/// The section: the page's `{{peers}}`, the tail of report.md and stdout (where a run
/// without these results shows nothing of them).
pub fn section(results: &Results, targets: &[Target]) -> Section {
    let Some(peers) = &results.peers else {
        return Section::new().only(Format::Markdown, Section::new().note(NOT_MEASURED));
    };
    let own_targets = target_table(&own_targets(targets));
    Section::new()
        .note(description(results, peers))
        .only(Format::Text, Section::new().gap())
        .only(
            Format::Markdown,
            Section::new()
                .heading("Targets", "")
                .targets(own_targets.clone()),
        )
        .heading(
            "Lock cycle: acquire with a lease + release, distinct keys (median [min–max] over repetitions)",
            "LOCK CYCLE (acquire with a lease + release, distinct keys)",
        )
        .table(cycles(peers))
        .heading(
            "Contention: one key, think 0–2 ms, hold 0.5 ms, waits server-side",
            "CONTENTION (one key; think 0–2 ms, hold 0.5 ms; waits server-side)",
        )
        .table(contention(peers))
        .heading(
            "Holder's death (SIGKILL while a waiter is queued) → next grant",
            "HOLDER'S DEATH (SIGKILL while a waiter is queued) → NEXT GRANT",
        )
        .table(takeover(peers))
        .only(
            Format::Text,
            Section::new()
                .heading("", "TARGETS (etcd side by side)")
                .targets(own_targets),
        )
}

/// A small etcd side by side with a figure of every kind, for the reports' tests.
#[cfg(test)]
pub fn example() -> PeersResult {
    use crate::results::contention::Sample;
    use crate::results::peers::{
        ContentionRow, ContentionSeries, CycleRow, CycleSeries, TakeoverSeries,
    };
    use crate::stats::wait_histogram;

    let cycle = |rate: f64, p99_ms: f64| CycleSample {
        cycles: (rate / 10.0) as u64,
        cycles_per_s: rate,
        p50_ms: p99_ms / 4.0,
        p99_ms,
        server_busy: 0.5,
        client_busy: f64::NAN,
    };
    let contended = |grants_per_s: f64, p99_ms: f64| Sample {
        grants_per_s,
        p50_ms: p99_ms / 2.0,
        p90_ms: p99_ms / 1.5,
        p99_ms,
        max_ms: p99_ms * 1.1,
        wait_count: 40,
        failed_per_grant: 0.0,
        failed: 0,
        lost: 0,
        jain: 0.995,
        per_client_grants: vec![10, 10, 10, 10],
        waits: wait_histogram(),
    };
    let takeover = |past: f64| TakeoverSample {
        kill_to_grant_ms: 1900.0 + past,
        past_lease_end_ms: past,
    };
    let per_system = |f: &dyn Fn(System) -> Vec<CycleSample>| {
        SYSTEMS
            .iter()
            .map(|&system| CycleSeries {
                system,
                samples: f(system),
            })
            .collect()
    };
    PeersResult {
        etcd: "etcd 3.4.23".into(),
        filesystem: "ext4 (/dev/vda)".into(),
        placement: "etcd pinned to CPU 0".into(),
        cycle_ms: 300,
        contention_ms: 200,
        takeover_lease_ms: 2000,
        load_before: 0.5,
        load_after: f64::NAN,
        cycles: vec![CycleRow {
            clients: 1,
            depth: 1,
            series: per_system(&|system| match system {
                System::Fencelock => vec![cycle(9000.0, 0.2), cycle(9500.0, 0.25)],
                System::FencelockAof => vec![cycle(2100.0, 0.7), cycle(2000.0, 0.8)],
                System::Etcd => vec![cycle(1200.0, 3.0), cycle(1250.0, 4.0)],
            }),
        }],
        contention: vec![ContentionRow {
            clients: 4,
            series: SYSTEMS
                .iter()
                .map(|&system| ContentionSeries {
                    system,
                    samples: match system {
                        System::Etcd => vec![contended(50.0, 100.0); 2],
                        _ => vec![contended(1500.0, 2.0), contended(1400.0, f64::NAN)],
                    },
                })
                .collect(),
        }],
        takeover: vec![
            TakeoverSeries {
                system: System::Fencelock,
                samples: vec![takeover(1.2), takeover(1.4)],
            },
            TakeoverSeries {
                system: System::Etcd,
                samples: vec![takeover(450.0), takeover(490.0)],
            },
        ],
    }
}
