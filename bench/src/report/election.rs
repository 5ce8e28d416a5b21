//! Scenario 9's part of the report: leader election with a public value (issue 24).
//! Four tables, no target:
//!
//! - how long `n` observers take to hear of a grant or a proclaim, `LOCK.OBSERVE …
//!   BLOCK` against `PUBLISH` → `SUBSCRIBE` + `GET` (p50/p99/max of every observer's
//!   wait, and the median time until the last had heard);
//! - the hand-rolled way's waits over `LOCK.OBSERVE`'s, p50 and p99, with the ratio of
//!   every repetition;
//! - `LOCK.PROCLAIM` and `LOCK.ACQUIRE … VALUE` against their baselines, pipelined and
//!   unpipelined (scenario 1's table, with the ratio of every repetition);
//! - bytes per blocked observer, per subscriber and per idle connection.

use crate::report::common::{
    cell, comparisons, each, fixed, group_digits, ms, spread_with, times, Table,
};
use crate::report::section::Section;
use crate::results::election::{Change, ElectionResult, Notify};
use crate::stats::spread;

fn waits(samples: &[f64]) -> String {
    spread_with(spread(samples), ms)
}

pub fn notify_table(result: &ElectionResult) -> Table {
    let mut table = Table::new(&[
        "observers",
        "change",
        "watched with",
        "wait p50 ms",
        "wait p99 ms",
        "wait max ms",
        "until all had heard, median ms",
    ]);
    for row in &result.notify {
        table.row(vec![
            group_digits(row.observers),
            row.change.label().to_string(),
            row.watch.label().to_string(),
            waits(&row.p50_ms),
            waits(&row.p99_ms),
            waits(&row.max_ms),
            waits(&row.all_heard_ms),
        ]);
    }
    table
}

pub fn notify_ratios_table(result: &ElectionResult) -> Table {
    let mut table = Table::new(&[
        "observers",
        "change",
        "wait p50: pub/sub ÷ LOCK.OBSERVE",
        "in each repetition",
        "wait p99: pub/sub ÷ LOCK.OBSERVE",
        "in each repetition",
    ]);
    for observers in result.observer_counts() {
        for change in Change::ALL {
            let ratio = |f: fn(&Notify) -> &Vec<f64>| {
                result
                    .notify_ratio(change, observers, f)
                    .unwrap_or_default()
            };
            let (p50, p99) = (ratio(|n| &n.p50_ms), ratio(|n| &n.p99_ms));
            table.row(vec![
                group_digits(observers),
                change.label().to_string(),
                times(&p50),
                each(&p50),
                times(&p99),
                each(&p99),
            ]);
        }
    }
    table
}

pub fn memory_table(result: &ElectionResult) -> Table {
    let mut table = Table::new(&[
        "connections",
        "per idle connection B",
        "per blocked observer B",
        "per subscriber B",
        "observer above an idle connection B",
        "subscriber above an idle connection B",
    ]);
    for m in &result.memory {
        table.row(vec![
            group_digits(m.observers),
            cell(&m.idle_connection, 0),
            cell(&m.observer, 0),
            cell(&m.subscriber, 0),
            cell(&m.observer_above_idle(), 0),
            cell(&m.subscriber_above_idle(), 0),
        ]);
    }
    table
}

fn notes(result: &ElectionResult) -> Vec<String> {
    let settle = match result.memory_settle_s {
        0 => "read at once".to_string(),
        s => format!("read {s} s after the last joined (Redis shrinks idle clients' buffers)"),
    };
    let mut notes = vec![
        format!(
            "How long observers take to hear of a change: each observer its own connection \
             (a subscriber two: its subscription and its GET), all read by one thread of \
             the load generator. {} changes a measurement, made by one more connection \
             once every watcher is ready, each wait timed from just before the change is \
             sent to the watcher holding the new state. Grant: LOCK.ACQUIRE key ttl TOKEN t \
             VALUE v on the free key, against SET key v NX PX ttl and PUBLISH channel v in \
             one write (freed again between rounds, untimed). Proclaim: LOCK.PROCLAIM key \
             t v, against the owner-checked script (GET = old value → SET key v XX \
             KEEPTTL) and PUBLISH in one write. An observer waits in LOCK.OBSERVE key \
             fence value BLOCK 0 and has heard when answered with the new [fence, value] \
             (it then waits again with it; the next change comes once INFO fencelock \
             counts every observer waiting); a subscriber, when the GET it sends on the \
             message is answered with the new value. Values of {} bytes and more. Both \
             ways back to back in alternating order, on a server of their own; each \
             ratio is taken within a repetition. Polling GET every X ms is not measured: \
             its wait is about X/2 by construction (scenario 3 measures polling).",
            result.rounds, result.value_bytes
        ),
        "Throughput: LOCK.PROCLAIM key token v on held keys (a new value each time) \
         against the hand-rolled leader key's change of value, EVALSHA of `if GET == old \
         then SET key new XX KEEPTTL` (the key holds the leader's value, which is also \
         what the owner checks); LOCK.ACQUIRE key ttl VALUE v against LOCK.ACQUIRE key \
         ttl and SET key value NX PX ttl on fresh keys; as scenario 1: 50 connections, \
         pipelined and unpipelined, alternating order, ratio within each repetition."
            .to_string(),
        format!(
            "Memory: used_memory delta over n connections on the same server, each blocked \
             in LOCK.OBSERVE … BLOCK 0 on one held key, each subscribed to one channel, or \
             each idle (sent one PING), {settle}; the three alternating in each \
             repetition, the clients gone before the next. The server frees a blocked \
             client's memory slowly once it has gone (Redis 7.0 here: after 8,000 \
             left, some 34 KB of each still allocated, freed at about 9 MB/s; the same \
             for LOCK.ACQUIRE … BLOCK waiters as for observers), so each turn starts once used_memory is \
             back at the first turn's baseline: the longest wait for that was {} s.",
            fixed(0)(result.memory_drain_s)
        ),
    ];
    if let Some(why) = &result.capped {
        notes.push(format!("Observers lowered: {why}."));
    }
    notes
}

/// The section (in report.md, docs/performance.md's figures and on stdout).
pub fn section(result: Option<&ElectionResult>) -> Section {
    let Some(result) = result else {
        return Section::not_measured("election");
    };
    let mut notes = notes(result).into_iter();
    let mut section = Section::new();
    if let Some(waits) = notes.next() {
        section = section.remark(waits);
    }
    section = section
        .heading(
            "How long observers take to hear of a change",
            "HOW LONG OBSERVERS TAKE TO HEAR OF A CHANGE",
        )
        .table(notify_table(result))
        .table(notify_ratios_table(result))
        .heading(
            "LOCK.PROCLAIM and LOCK.ACQUIRE … VALUE throughput",
            "LOCK.PROCLAIM AND LOCK.ACQUIRE … VALUE",
        );
    if let Some(throughput) = notes.next() {
        section = section.remark(throughput);
    }
    section = section
        .table(comparisons(&result.throughput, true))
        .heading("Memory per blocked observer", "MEMORY PER BLOCKED OBSERVER");
    notes
        .fold(section, Section::remark)
        .table(memory_table(result))
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::report::section::Format;
    use crate::results::election::{
        ObserverMemory, Watch, ACQUIRE, ACQUIRE_VALUE, LUA_PROCLAIM, PROCLAIM, SET_NX_PX,
    };
    use crate::results::throughput::{GroupResult, Series};

    /// A run of every part, with the spread a real one has.
    pub fn example() -> ElectionResult {
        let group = |id: &str, depth: usize, series: &[(&str, [f64; 3])]| GroupResult {
            id: id.into(),
            title: id.into(),
            unit: "ops/s".into(),
            depth,
            series: series
                .iter()
                .map(|(label, samples)| Series {
                    label: label.to_string(),
                    commands_per_op: 1,
                    samples: samples.to_vec(),
                    busy: 0,
                    server_busy: vec![1.0; 3],
                })
                .collect(),
        };
        let notify = |observers, change, watch, p50: f64| Notify {
            change,
            watch,
            observers,
            p50_ms: vec![p50, p50 * 1.1, p50 * 0.9],
            p99_ms: vec![p50 * 2.0; 3],
            max_ms: vec![p50 * 3.0; 3],
            all_heard_ms: vec![p50 * 2.5; 3],
        };
        ElectionResult {
            throughput: vec![
                group(
                    "proclaim",
                    32,
                    &[
                        (PROCLAIM, [400_000.0, 410_000.0, 390_000.0]),
                        (LUA_PROCLAIM, [200_000.0; 3]),
                    ],
                ),
                group(
                    "acquire-value",
                    1,
                    &[
                        (ACQUIRE_VALUE, [50_000.0; 3]),
                        (ACQUIRE, [51_000.0; 3]),
                        (SET_NX_PX, [52_000.0; 3]),
                    ],
                ),
            ],
            rounds: 100,
            value_bytes: 21,
            notify: vec![
                notify(1_000, Change::Grant, Watch::Observe, 1.0),
                notify(1_000, Change::Grant, Watch::PubSub, 2.0),
                notify(1_000, Change::Proclaim, Watch::Observe, 1.0),
                notify(1_000, Change::Proclaim, Watch::PubSub, 3.0),
            ],
            memory_settle_s: 4,
            memory_drain_s: 38.5,
            memory: vec![ObserverMemory {
                observers: 10_000,
                idle_connection: vec![20_000.0; 3],
                observer: vec![20_300.0, 20_310.0, 20_290.0],
                subscriber: vec![20_200.0; 3],
            }],
            capped: None,
        }
    }

    #[test]
    fn the_section_reads_back_from_json_and_renders() {
        let run = example();
        let json = serde_json::to_string(&run).unwrap();
        let back: ElectionResult = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        let page = section(Some(&back)).render(Format::Markdown);
        assert!(
            page.contains("| 1,000 | grant (new leader) | PUBLISH → SUBSCRIBE + GET | 2.00 [1.80–2.20] | 4.00 [4.00–4.00] | 6.00 [6.00–6.00] | 5.00 [5.00–5.00] |"),
            "{page}"
        );
        assert!(
            page.contains("| 1,000 | proclaim (new value) | 3.000× [3.000×–3.000×] | 3.000, 3.000, 3.000 | 3.000× [3.000×–3.000×] | 3.000, 3.000, 3.000 |"),
            "{page}"
        );
        assert!(
            page.contains("| proclaim (ops/s) | pipelined | LOCK.PROCLAIM 400k [390k–410k] | Lua: GET = old → SET XX KEEPTTL 200k [200k–200k] | 2.00× [1.95×–2.05×] | 2.000, 2.050, 1.950 |"),
            "{page}"
        );
        assert!(page.contains("| 10,000 | 20000 [20000–20000] | 20300 [20290–20310] | 20200 [20200–20200] | 300 [290–310] | 200 [200–200] |"), "{page}");
        assert!(section(Some(&back))
            .render(Format::Text)
            .contains("MEMORY PER BLOCKED OBSERVER"));
        assert!(section(None)
            .render(Format::Markdown)
            .contains("Not measured"));
    }
}
