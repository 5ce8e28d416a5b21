//! Reporting: the tables, the targets, the chart, report.json, the docs page and
//! `combine`'s page of several servers, all made from the results alone (nothing here
//! talks to a server).

//!
//! From the top down: this file publishes; `page` lays out the page (the main tables
//! and each section in turn), `targets` lists every target, `combine` and `docs` make
//! the pages of several servers and of the docs, `svg` and `curves_chart` the charts;
//! below them one file per section (`sessions`, `acquireall`, `election`, `curves`,
//! `peers`), each describing its section once; `section` renders a section as text
//! or markdown, and `common` holds what all of them are made of (the table, number
//! formats, a judged target). Each file uses only those below it.

pub mod acquireall;
pub mod combine;
pub mod common;
pub mod curves;
pub mod curves_chart;
pub mod docs;
pub mod election;
pub mod page;
pub mod peers;
pub mod section;
pub mod sessions;
pub mod svg;
pub mod targets;

use std::io;
use std::path::Path;

use crate::results::{ReportFile, Results};
use section::Format;

/// Checks the targets, prints the tables on stdout and writes report.json, report.md,
/// bench.svg and (when the curves ran) curves.svg into `out_dir`; with `docs`, also
/// docs/performance.md, docs/bench.svg and docs/curves.svg.
pub fn publish(results: Results, out_dir: &Path, docs: bool) -> io::Result<()> {
    let file = ReportFile {
        ratios: results.ratios(),
        targets: targets::evaluate(&results),
        results,
    };
    let results = &file.results;
    let page = page::page(results, &file.targets, docs::CHART_LINK);
    print!("{}", page.render(Format::Text));
    let peers = peers::section(results, &file.targets);
    let peers_text = peers.render(Format::Text);
    if !peers_text.is_empty() {
        print!("\nETCD SIDE BY SIDE\n{peers_text}");
    }
    let curves = curves::section(results.curves.as_ref(), &file.targets, curves::CHART_LINK);
    if results.curves.is_some() {
        print!(
            "\nCOST CURVES (server CPU µs per operation)\n\n{}",
            curves.render(Format::Text)
        );
    }
    let curves_md = curves.render(Format::Markdown);
    let curves_svg = match &results.curves {
        Some(measured) => Some(curves_chart::chart(measured, &results.machine)?),
        None => None,
    };
    // report.md ends with the cost curves, and the etcd side by side when the run has
    // it; the page has a place of its own for each, filled either way.
    let peers = peers.render(Format::Markdown);
    let figures = page.render(Format::Markdown);
    let mut report = figures.clone() + "\n### Cost curves\n\n" + &curves_md;
    if results.peers.is_some() {
        report += &format!("\n### Side by side with etcd\n\n{peers}");
    }

    std::fs::create_dir_all(out_dir)?;
    let json = serde_json::to_string_pretty(&file)
        .map_err(|e| io::Error::other(format!("report.json: {e}")))?;
    std::fs::write(out_dir.join("report.json"), json + "\n")?;
    std::fs::write(out_dir.join("report.md"), &report)?;
    let chart = svg::chart(results)?;
    std::fs::write(out_dir.join("bench.svg"), &chart)?;
    if let Some(svg) = &curves_svg {
        std::fs::write(out_dir.join(curves::CHART_LINK), svg)?;
    }
    eprintln!(
        "wrote report.json, report.md, bench.svg{} in {}",
        if curves_svg.is_some() {
            " and curves.svg"
        } else {
            ""
        },
        out_dir.display()
    );
    if docs {
        docs::publish(&chart, &figures, curves_svg.as_deref(), &curves_md, &peers)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::contention::{ContentionResult, Lock, Mode, Sample};
    use crate::results::machine::{Machine, Natives};
    use crate::results::memory::MemoryResult;
    use crate::results::profile::{PerCommand, ProfileResult, Row};
    use crate::results::throughput::{GroupResult, Series};
    use crate::results::Workload;
    use crate::stats::wait_histogram;

    fn sample(grants_per_s: f64, p50_ms: f64) -> Sample {
        Sample {
            grants_per_s,
            p50_ms,
            p90_ms: 2.0,
            p99_ms: 3.5,
            max_ms: 4.25,
            wait_count: 12,
            failed_per_grant: 0.0,
            failed: 0,
            lost: 0,
            jain: 0.999,
            per_client_grants: vec![3, 3, 3, 3],
            waits: wait_histogram(),
        }
    }

    /// A small run with a figure of every kind, NaN ones (nothing measured) included.
    fn results() -> Results {
        let series = |label: &str, samples: Vec<f64>| Series {
            label: label.into(),
            commands_per_op: 1,
            samples,
            busy: 2,
            server_busy: vec![0.97, f64::NAN, 1.0],
        };
        Results {
            machine: Machine {
                cpu: "CPU".into(),
                cpus: 2,
                memory_gib: 24.0,
                os: "OS".into(),
                kernel: "6.1".into(),
                server: "redis-7.0".into(),
                redis: "Redis 7.0.15 (jemalloc-5.3.0)".into(),
                server_binary: "redis-server".into(),
                module: "libfencelock.so".into(),
                floor_module: "libfencelock_floor.so".into(),
                placement: "not pinned".into(),
            },
            natives: Natives::default(),
            workload: Workload {
                smoke: true,
                repetitions: 3,
                connections: 50,
                depth: 32,
                pipelined_commands: 320,
                unpipelined_commands: 20,
                contention_ms: 200,
                contention_clients: vec![4],
                semaphore_clients: vec![],
                semaphore_limit: 4,
                memory_locks: 1000,
                profile_commands: 200,
            },
            started_unix: 1_700_000_000,
            elapsed_s: 12.5,
            throughput: vec![GroupResult {
                id: "acquire".into(),
                title: "acquire on fresh keys".into(),
                unit: "grants/s".into(),
                depth: 32,
                series: vec![
                    series("LOCK.ACQUIRE", vec![688_123.4, 690_001.0, 685_000.5]),
                    series("FLOOR.ACQUIRE", vec![700_000.0, 710_000.0, 705_000.0]),
                    series("SET NX PX", vec![815_000.0, 773_000.25, 837_000.0]),
                ],
            }],
            contention: [Mode::Block, Mode::Poll { retry_ms: 50 }]
                .into_iter()
                .map(|mode| ContentionResult {
                    lock: Lock::Mutex,
                    clients: 4,
                    mode,
                    samples: vec![sample(1500.0, 0.96), sample(1480.0, f64::NAN)],
                })
                .collect(),
            memory: MemoryResult {
                locks: 1000,
                fencelock_held: vec![165.0, 165.0, 165.5],
                floor_held: vec![165.0, 164.5, 165.0],
                set_held: vec![149.0, 149.0, 149.0],
                set_with_fence_held: vec![223.1, 223.1, 223.1],
                fencelock_left: vec![0.0, 0.0, 0.0],
                floor_left: vec![0.0, 0.0, 0.0],
                lua_left: vec![84.65, 84.65, 84.65],
            },
            profile: ProfileResult {
                rows: vec![
                    Row {
                        label: "PING".into(),
                        cpu_us: f64::NAN,
                        bytes_in: 14.0,
                        bytes_out: 7.3,
                        counts: None,
                    },
                    Row {
                        label: "LOCK.ACQUIRE".into(),
                        cpu_us: 1.57,
                        bytes_in: 56.6,
                        bytes_out: 62.3,
                        counts: Some(PerCommand {
                            instructions: 4210.0,
                            allocations: 3.02,
                        }),
                    },
                ],
                without_callgrind: None,
            },
            peers: None,
            curves: None,
            sessions: None,
            acquireall: None,
            election: None,
        }
    }

    fn written(results: Results) -> (ReportFile, String) {
        let file = ReportFile {
            ratios: results.ratios(),
            targets: targets::evaluate(&results),
            results,
        };
        let json = serde_json::to_string_pretty(&file).expect("a report serializes");
        (file, json)
    }

    fn page(file: &ReportFile) -> String {
        page::page(&file.results, &file.targets, docs::CHART_LINK).render(Format::Markdown)
    }

    /// The floor targets: every one listed, wanting ≥ 0.95× (and ≤ 1.05× for memory),
    /// judged where measured and `n/a` (never dropped) where not.
    #[test]
    fn floor_targets_are_all_listed_and_judged() {
        let (file, _) = written(results());
        let floor: Vec<&crate::results::Target> = file
            .targets
            .iter()
            .filter(|t| t.name.contains("FLOOR."))
            .collect();
        let names: Vec<&str> = floor.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "pipelined: LOCK.ACQUIRE ÷ FLOOR.ACQUIRE",
                "pipelined: LOCK.RELEASE ÷ FLOOR.RELEASE",
                "pipelined: LOCK.REFRESH ÷ FLOOR.REFRESH",
                "unpipelined: LOCK.ACQUIRE ÷ FLOOR.ACQUIRE",
                "unpipelined: LOCK.RELEASE ÷ FLOOR.RELEASE",
                "unpipelined: LOCK.REFRESH ÷ FLOOR.REFRESH",
            ]
        );
        assert!(floor.iter().all(|t| t.wanted == "≥ 0.95×"));
        // The fixture measures the pipelined acquire only: 690k ÷ 710k at the median.
        assert_eq!(floor[0].met, Some(true));
        assert!((floor[0].measured.median - 690_001.0 / 710_000.0).abs() < 1e-9);
        assert!(floor[1..].iter().all(|t| t.met.is_none()));
        let memory = file
            .targets
            .iter()
            .find(|t| t.name == "memory: held fencelock lock ÷ held floor lock")
            .expect("the memory floor target");
        assert_eq!(memory.wanted, "≤ 1.05×");
        assert_eq!(memory.met, Some(true));
        let page = page(&file);
        assert!(page.contains(
            "| pipelined: LOCK.ACQUIRE ÷ FLOOR.ACQUIRE | ≥ 0.95× | 0.97 [0.97–0.98]× | met |"
        ));
        assert!(page.contains("per held lock: floor module"));
    }

    /// A report.json from before the cost curves, the sessions or the many-key
    /// scenario (no `curves`, `sessions` or `acquireall` field) still reads.
    #[test]
    fn report_json_without_curves_or_sessions_reads_back() {
        let (_, json) = written(results());
        let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
        value.as_object_mut().unwrap().remove("curves");
        value.as_object_mut().unwrap().remove("sessions");
        value.as_object_mut().unwrap().remove("acquireall");
        value.as_object_mut().unwrap().remove("election");
        let back: ReportFile = serde_json::from_value(value).expect("an older report.json reads");
        assert!(back.results.curves.is_none());
        assert!(back.results.sessions.is_none());
        assert!(back.results.acquireall.is_none());
        assert!(back.results.election.is_none());
    }

    /// A run with the many-key scenario reads back the same, its tables and targets
    /// included.
    #[test]
    fn report_json_reads_back_with_acquireall() {
        let mut run = results();
        run.acquireall = Some(acquireall::tests::example());
        let (file, json) = written(run);
        let back: ReportFile = serde_json::from_str(&json).expect("report.json reads back");
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), json);
        let page = page(&back);
        assert_eq!(page, self::page(&file));
        assert!(page.contains("### Many keys at once"), "{page}");
        assert!(page.contains(
            "| pipelined: four-key cycle, LOCK.ACQUIREALL ÷ 4 pipelined LOCK.ACQUIRE | ≥ 0.9× | 0.95 [0.94–0.96]× | met |"
        ), "{page}");
        assert!(page.contains(
            "| deadlock detection, waiters spread over chains of keys: server CPU of an acquire that waits, on ÷ off | ≤ 1.1× | 2.00 [1.96–2.04]× | **MISSED** |"
        ), "{page}");
    }

    /// A run with the leader election reads back the same, its section included.
    #[test]
    fn report_json_reads_back_with_the_election() {
        let mut run = results();
        run.election = Some(election::tests::example());
        let (file, json) = written(run);
        let back: ReportFile = serde_json::from_str(&json).expect("report.json reads back");
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), json);
        let page = page(&back);
        assert_eq!(page, self::page(&file));
        assert!(
            page.contains("### Leader election (LOCK.OBSERVE, LOCK.PROCLAIM, VALUE)"),
            "{page}"
        );
    }

    /// A run with the sessions reads back the same, their tables and targets included.
    #[test]
    fn report_json_reads_back_with_the_sessions() {
        let mut run = results();
        run.sessions = Some(sessions::tests::example());
        let (file, json) = written(run);
        let back: ReportFile = serde_json::from_str(&json).expect("report.json reads back");
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), json);
        let page = page(&back);
        assert_eq!(page, self::page(&file));
        assert!(page.contains("### Sessions"), "{page}");
        assert!(page.contains(
            "| sessions, 1,000 holdings: server CPU of one LOCK.KEEPALIVE ÷ 1,000 pipelined LOCK.REFRESH | < 1× | 0.40 [0.36–0.44]× | met |"
        ), "{page}");
    }

    /// What `combine` reads back is what the run wrote: the same file again, and the
    /// same tables (NaN figures come back as NaN, not as an error or a zero).
    #[test]
    fn report_json_reads_back_into_the_same_report() {
        let (file, json) = written(results());
        let back: ReportFile = serde_json::from_str(&json).expect("report.json reads back");
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), json);
        assert_eq!(page(&back), page(&file));
        assert!(back.results.profile.rows[0].cpu_us.is_nan());
        assert!(back.results.contention[0].samples[1].p50_ms.is_nan());
    }

    /// A report with the etcd side by side reads back the same, its section included;
    /// one without it has no `peers` field at all (and still reads back, above).
    #[test]
    fn report_json_reads_back_with_and_without_the_etcd_side_by_side() {
        let (_, json) = written(results());
        assert!(!json.contains("\"peers\""));
        let mut run = results();
        run.peers = Some(peers::example());
        let (file, json) = written(run);
        let back: ReportFile = serde_json::from_str(&json).expect("report.json reads back");
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), json);
        let section =
            |f: &ReportFile| peers::section(&f.results, &f.targets).render(Format::Markdown);
        assert_eq!(section(&back), section(&file));
        assert!(section(&file).contains("| 1 client | etcd |"));
        assert!(back.results.peers.unwrap().load_after.is_nan());
    }
}
