//! Scenario 8's part of the report: many keys at once. Three tables and the issue's
//! targets (issue 23):
//!
//! - the four-key cycle, `LOCK.ACQUIREALL` of 4 keys against 4 pipelined
//!   `LOCK.ACQUIRE`s, pipelined and unpipelined, with the ratio of every repetition:
//!   target ≥ 0.9× in both modes;
//! - contention over overlapping 4-key sets, `LOCK.ACQUIREALL … BLOCK` against a
//!   client-side multi-lock with backoff (grants/s, waits, failed attempts, Jain's
//!   index; the ratios of grants/s and of wait p99 per repetition), no target;
//! - an acquire that waits with deadlock detection on and off, thousands of waiters
//!   queued, in two shapes of the wait-for graph: target on ÷ off ≤ 1.1× in server CPU
//!   for each shape (the command's own time beside it).

use crate::report::common::{
    cell, each, fixed, group_digits, rate, sample_cells, spread_with, target, times, Table, Want,
    SAMPLE_HEADERS,
};
use crate::report::section::Section;
use crate::results::acquireall::{
    AcquireAllResult, Shape, WaitShape, ACQUIREALL_CYCLE, PIPELINED_CYCLE,
};
use crate::results::Target;
use crate::stats::spread;

/// Least `LOCK.ACQUIREALL` of 4 keys may reach of 4 pipelined `LOCK.ACQUIRE`s.
pub const CYCLE_TARGET: f64 = 0.9;
/// Most deadlock detection may add to an acquire that waits.
pub const DETECTION_TARGET: f64 = 1.1;

fn cycle_name(pipelined: bool) -> String {
    let mode = if pipelined {
        "pipelined"
    } else {
        "unpipelined"
    };
    format!("{mode}: four-key cycle, LOCK.ACQUIREALL ÷ 4 pipelined LOCK.ACQUIRE")
}

fn detection_name(shape: Shape) -> String {
    format!(
        "deadlock detection, waiters {}: server CPU of an acquire that waits, on ÷ off",
        shape.label()
    )
}

/// Every target of the scenario, listed whether or not this run measured it.
pub fn targets(result: Option<&AcquireAllResult>) -> Vec<Target> {
    let mut targets: Vec<Target> = [true, false]
        .into_iter()
        .map(|pipelined| {
            target(
                cycle_name(pipelined),
                Want::AtLeast(CYCLE_TARGET),
                "×",
                result.and_then(|r| r.cycle_ratio(pipelined)),
            )
        })
        .collect();
    targets.extend(Shape::ALL.into_iter().map(|shape| {
        target(
            detection_name(shape),
            Want::AtMost(DETECTION_TARGET),
            "×",
            result
                .and_then(|r| r.waits.shape(shape))
                .map(WaitShape::ratio),
        )
    }));
    targets
}

pub fn cycles_table(result: &AcquireAllResult) -> Table {
    let mut table = Table::new(&[
        "mode",
        &format!("{ACQUIREALL_CYCLE} (cycles/s)"),
        &format!("{PIPELINED_CYCLE} (cycles/s)"),
        "ratio",
        "ratio in each repetition",
    ]);
    for group in &result.cycles {
        let pipelined = group.depth > 1;
        let series = |label: &str| {
            group
                .series
                .iter()
                .find(|s| s.label == label)
                .map_or_else(Vec::new, |s| s.samples.clone())
        };
        let ratio = result.cycle_ratio(pipelined).unwrap_or_default();
        table.row(vec![
            if pipelined {
                format!("pipelined ({} steps in flight)", group.depth)
            } else {
                "unpipelined".to_string()
            },
            spread_with(spread(&series(ACQUIREALL_CYCLE)), rate),
            spread_with(spread(&series(PIPELINED_CYCLE)), rate),
            times(&ratio),
            each(&ratio),
        ]);
    }
    table
}

pub fn contention_table(result: &AcquireAllResult) -> Table {
    let mut table = Table::new(&[&["clients", "mechanism"][..], &SAMPLE_HEADERS].concat());
    for entry in &result.contention {
        let mut row = vec![
            entry.clients.to_string(),
            entry.mechanism.label().to_string(),
        ];
        row.extend(sample_cells(&entry.samples));
        table.row(row);
    }
    table
}

pub fn contention_ratios_table(result: &AcquireAllResult) -> Table {
    let mut table = Table::new(&[
        "clients",
        "grants/s: ACQUIREALL ÷ multi-lock",
        "in each repetition",
        "wait p99: multi-lock ÷ ACQUIREALL",
        "in each repetition",
    ]);
    for clients in result.client_counts() {
        let grants = result
            .contention_ratio(clients, |s| s.grants_per_s)
            .unwrap_or_default();
        let p99 = result
            .contention_ratio(clients, |s| s.p99_ms)
            .unwrap_or_default();
        let p99: Vec<f64> = p99.iter().map(|x| 1.0 / x).collect();
        table.row(vec![
            clients.to_string(),
            times(&grants),
            each(&grants),
            times(&p99),
            each(&p99),
        ]);
    }
    table
}

pub fn waits_table(result: &AcquireAllResult) -> Table {
    let mut table = Table::new(&[
        "waiters queued",
        "waiters",
        "keys",
        "owners one wait reaches",
        "detection on µs",
        "detection off µs",
        "on ÷ off",
        "on ÷ off in each repetition",
        "added by detection µs",
        "in-command on ÷ off (µs on / off)",
    ]);
    for shape in &result.waits.shapes {
        let command = format!(
            "{} ({} / {})",
            times(&shape.command_ratio()),
            fixed(2)(spread(&shape.on_command_us).median),
            fixed(2)(spread(&shape.off_command_us).median)
        );
        table.row(vec![
            shape.shape.label().to_string(),
            group_digits(shape.waiters),
            group_digits(shape.keys),
            group_digits(shape.reach),
            cell(&shape.on_us, 2),
            cell(&shape.off_us, 2),
            times(&shape.ratio()),
            each(&shape.ratio()),
            cell(&shape.added_us(), 2),
            command,
        ]);
    }
    table
}

fn notes(result: &AcquireAllResult) -> Vec<String> {
    let plan = &result.contention_plan;
    let waits = &result.waits;
    let idle: Vec<String> = waits
        .shapes
        .iter()
        .map(|s| format!("{}%", fixed(1)(s.idle_cpu_share * 100.0)))
        .collect();
    let mut notes = vec![
        "Four-key cycle: each connection takes 4 keys of its own under its client token \
         and gives them back, with one LOCK.ACQUIREALL 4 k1 k2 k3 k4 ttl TOKEN t or with \
         4 LOCK.ACQUIRE ki ttl TOKEN t in one write, then 4 LOCK.RELEASE in one write for \
         both; the same number of cycles for both, back to back in alternating order, \
         50 connections, pipelined (steps in flight per connection, a step being one \
         write: the acquire or the release of a cycle) and unpipelined (one step at a \
         time). Each ratio is taken within a repetition."
            .to_string(),
        format!(
            "Contention: each client its own process, looping: think 0–{} ms, draw {} \
             distinct keys out of {} (random order), ask, hold {} ms, release each. \
             LOCK.ACQUIREALL … BLOCK {} (server token, queued in every key's queue at \
             once); the multi-lock takes the keys in the drawn order with LOCK.ACQUIRE \
             … TOKEN (no BLOCK), and on a refusal releases what it took and sleeps a \
             full-jitter exponential backoff (after the n-th refusal in a row, uniform \
             in 0..min({} ms, {} ms × 2^(n−1))) before starting again. The wait is ask \
             to holding every key; failed attempts are refused rounds (or timeouts). \
             Runs of {} ms.",
            plan.think_max_ms,
            plan.keys_per_set,
            plan.keyspace,
            plan.hold_ms,
            plan.block_timeout_ms,
            plan.backoff_cap_ms,
            plan.backoff_base_ms,
            plan.duration_ms
        ),
        format!(
            "An acquire that waits: {} connections, each with a token that holds a key of \
             its own, send LOCK.ACQUIRE key ttl TOKEN t BLOCK 0 on a held key; the server \
             event loop's CPU from the first send until INFO fencelock counts them all \
             queued (polled every 2 ms), less the idle server's share ({}), per acquire; \
             then, outside the measurement, CLIENT UNBLOCK ends each wait. {} rounds a \
             measurement, detection on and off (CONFIG SET fencelock.deadlock-detection) \
             alternating, each shape on a server of its own. In-command time is INFO \
             commandstats' for lock.acquire over the same span (the enqueue and the \
             search, without reading and dispatching; wall-clock time, so on a shared \
             machine it also counts time the server was off its CPU). All on the key waited for: one \
             key, its waiters' tokens each holding a key of their own (the search reaches \
             the one holder). Spread over chains: chains of 10 keys, 10 waiters on each, \
             every key held by a session that also waits first in the next key's queue, \
             the new waits spread over the chains' first keys: the search walks 10 \
             holders and keys (checked: the last holder asking for its chain's first key \
             is refused with DEADLOCK).",
            group_digits(waits.joiners),
            idle.join(" / "),
            waits.rounds
        ),
    ];
    if let Some(why) = &waits.capped {
        notes.push(format!("Waiters lowered: {why}."));
    }
    notes
}

/// The section (in report.md, docs/performance.md's figures and on stdout).
pub fn section(result: Option<&AcquireAllResult>) -> Section {
    let Some(result) = result else {
        return Section::not_measured("acquireall");
    };
    let mut notes = notes(result).into_iter();
    let mut section = Section::new();
    if let Some(cycles) = notes.next() {
        section = section.remark(cycles);
    }
    section = section
        .heading(
            "Four-key cycle: LOCK.ACQUIREALL against 4 pipelined LOCK.ACQUIRE",
            "FOUR-KEY CYCLE",
        )
        .table(cycles_table(result))
        .heading(
            "Contention over overlapping key sets",
            "CONTENTION OVER KEY SETS",
        );
    if let Some(contention) = notes.next() {
        section = section.remark(contention);
    }
    section = section
        .table(contention_table(result))
        .table(contention_ratios_table(result))
        .heading(
            "An acquire that waits: deadlock detection on against off (server CPU per acquire)",
            "AN ACQUIRE THAT WAITS, DETECTION ON AGAINST OFF",
        );
    notes
        .fold(section, Section::remark)
        .table(waits_table(result))
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::report::section::Format;
    use crate::results::acquireall::{
        ContentionPlan, Mechanism, MultiKeyContention, WaitCost, WaitShape,
    };
    use crate::results::contention::Sample;
    use crate::results::throughput::{GroupResult, Series};
    use crate::stats::wait_histogram;

    fn sample(grants_per_s: f64, p99_ms: f64) -> Sample {
        Sample {
            grants_per_s,
            p50_ms: p99_ms / 3.0,
            p90_ms: p99_ms / 2.0,
            p99_ms,
            max_ms: p99_ms * 1.5,
            wait_count: 100,
            failed_per_grant: 0.0,
            failed: 0,
            lost: 0,
            jain: 0.99,
            per_client_grants: vec![10; 16],
            waits: wait_histogram(),
        }
    }

    /// A run of every part, with the spread a real one has.
    pub fn example() -> AcquireAllResult {
        let group = |depth: usize, ours: [f64; 3], theirs: [f64; 3]| GroupResult {
            id: "acquireall".into(),
            title: "four-key cycle".into(),
            unit: "cycles/s".into(),
            depth,
            series: [(ACQUIREALL_CYCLE, ours, 5), (PIPELINED_CYCLE, theirs, 8)]
                .into_iter()
                .map(|(label, samples, commands_per_op)| Series {
                    label: label.into(),
                    commands_per_op,
                    samples: samples.to_vec(),
                    busy: 0,
                    server_busy: vec![1.0; 3],
                })
                .collect(),
        };
        let contention = |clients, mechanism, grants: f64, p99: f64| MultiKeyContention {
            clients,
            mechanism,
            samples: vec![sample(grants, p99), sample(grants * 1.1, p99 * 0.9)],
        };
        let shape = |shape, keys, reach, on: f64, off: f64| WaitShape {
            shape,
            waiters: 10_000,
            keys,
            reach,
            on_us: vec![on, on * 1.02, on * 0.98],
            off_us: vec![off; 3],
            on_command_us: vec![on / 2.0; 3],
            off_command_us: vec![off / 2.0; 3],
            idle_cpu_share: 0.002,
        };
        AcquireAllResult {
            cycles: vec![
                group(32, [95_000.0, 96_000.0, 94_000.0], [100_000.0; 3]),
                group(1, [12_000.0, 11_500.0, 12_100.0], [10_000.0; 3]),
            ],
            contention_plan: ContentionPlan {
                keyspace: 16,
                keys_per_set: 4,
                duration_ms: 5_000,
                think_max_ms: 2.0,
                hold_ms: 0.5,
                backoff_base_ms: 1.0,
                backoff_cap_ms: 32.0,
                block_timeout_ms: 30_000,
            },
            contention: vec![
                contention(16, Mechanism::AcquireAll, 900.0, 40.0),
                contention(16, Mechanism::MultiLock, 450.0, 200.0),
                contention(32, Mechanism::AcquireAll, 800.0, 90.0),
                contention(32, Mechanism::MultiLock, 200.0, 300.0),
            ],
            waits: WaitCost {
                planned_waiters: 10_000,
                capped: None,
                joiners: 1_000,
                rounds: 5,
                lease_ms: 600_000,
                shapes: vec![
                    shape(Shape::OneKey, 1, 1, 10.5, 10.0),
                    shape(Shape::Chains, 1_000, 10, 20.0, 10.0),
                ],
            },
        }
    }

    #[test]
    fn targets_are_judged_and_listed_when_not_measured() {
        let run = example();
        let targets = targets(Some(&run));
        let judged = |name: &str| targets.iter().find(|t| t.name == name).unwrap();
        let pipelined = judged(&cycle_name(true));
        assert_eq!(pipelined.wanted, "≥ 0.9×");
        assert!((pipelined.measured.median - 0.95).abs() < 1e-9);
        assert_eq!(pipelined.met, Some(true));
        assert_eq!(judged(&cycle_name(false)).met, Some(true));
        let one_key = judged(&detection_name(Shape::OneKey));
        assert_eq!(one_key.wanted, "≤ 1.1×");
        assert!((one_key.measured.median - 1.05).abs() < 1e-9);
        assert_eq!(one_key.met, Some(true));
        assert_eq!(judged(&detection_name(Shape::Chains)).met, Some(false));
        let none = super::targets(None);
        assert_eq!(none.len(), targets.len());
        assert!(none.iter().all(|t| t.met.is_none()));
    }

    #[test]
    fn the_section_reads_back_from_json_and_renders() {
        let run = example();
        let json = serde_json::to_string(&run).unwrap();
        let back: AcquireAllResult = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        let page = section(Some(&back)).render(Format::Markdown);
        assert!(
            page.contains("| pipelined (32 steps in flight) | 95k [94k–96k] | 100k [100k–100k] | 0.950× [0.940×–0.960×] | 0.950, 0.960, 0.940 |"),
            "{page}"
        );
        assert!(page.contains("| 16 | 2.000× [2.000×–2.000×] | 2.000, 2.000 | 5.000× [5.000×–5.000×] | 5.000, 5.000 |"), "{page}");
        assert!(page.contains("| spread over chains of keys | 10,000 | 1,000 | 10 | 20.00 [19.60–20.40] | 10.00 [10.00–10.00] | 2.000× [1.960×–2.040×] | 2.000, 2.040, 1.960 | 10.00 [9.60–10.40] | 2.000× [2.000×–2.000×] (10.00 / 5.00) |"), "{page}");
        assert!(section(Some(&back))
            .render(Format::Text)
            .contains("FOUR-KEY CYCLE"));
        assert!(section(None)
            .render(Format::Markdown)
            .contains("Not measured"));
    }
}
