//! `make bench-all`'s last step: `combine OUT.md DIR…` reads back the `report.json`
//! each server's run left in its directory (into the same `ReportFile` the run wrote)
//! and writes one markdown page: tables with a column per server — the targets (met
//! or missed), every throughput ratio and the per-command profile — so that servers
//! can be compared line by line, then one throughput and memory table per server with
//! its rates. Each comparison stays a
//! ratio measured within one server's run: rates are not comparable across servers.

use std::io;
use std::path::{Path, PathBuf};

use crate::report::common::{fixed, rate, spread_with, Table};
use crate::results::profile::PerCommand;
use crate::results::throughput::Series;
use crate::results::ReportFile;
use crate::stats::spread;

struct Report {
    dir: PathBuf,
    file: ReportFile,
}

impl Report {
    fn read(dir: &Path) -> io::Result<Self> {
        let path = dir.join("report.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        let file = serde_json::from_str(&text)
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            file,
        })
    }

    fn header(&self) -> String {
        let machine = &self.file.results.machine;
        format!("{} ({})", machine.server, machine.redis)
    }
}

/// Rows keyed by a label, with one cell per report; rows come in the order of the
/// report with the most (the server with the most baselines), then any others.
fn merge(
    reports: &[Report],
    rows_of: impl Fn(&Report) -> Vec<(String, String)>,
) -> Vec<(String, Vec<String>)> {
    let mut per_report: Vec<(usize, Vec<(String, String)>)> =
        reports.iter().map(&rows_of).enumerate().collect();
    per_report.sort_by_key(|(_, rows)| std::cmp::Reverse(rows.len()));
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for (i, report_rows) in per_report {
        for (key, cell) in report_rows {
            let at = match rows.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    rows.push((key, vec!["n/a".to_string(); reports.len()]));
                    rows.len() - 1
                }
            };
            rows[at].1[i] = cell;
        }
    }
    rows
}

fn table(first: &[&str], reports: &[Report], rows: Vec<(String, Vec<String>)>) -> Table {
    let mut headers: Vec<String> = first.iter().map(|s| s.to_string()).collect();
    headers.extend(reports.iter().map(Report::header));
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut table = Table::new(&headers);
    for (key, cells) in rows {
        let mut row: Vec<String> = key.split('\u{1f}').map(str::to_string).collect();
        row.extend(cells);
        table.row(row);
    }
    table
}

fn targets(reports: &[Report]) -> Table {
    let rows = merge(reports, |report| {
        report
            .file
            .targets
            .iter()
            .map(|t| {
                let cell = match t.met {
                    None => "n/a".to_string(),
                    Some(met) => format!(
                        "{}{} {}",
                        spread_with(t.measured, fixed(t.decimals)),
                        t.unit,
                        if met { "met" } else { "**MISSED**" }
                    ),
                };
                (format!("{}\u{1f}{}", t.name, t.wanted), cell)
            })
            .collect()
    });
    table(&["target", "wanted"], reports, rows)
}

fn ratios(reports: &[Report]) -> Table {
    let rows = merge(reports, |report| {
        report
            .file
            .ratios
            .iter()
            .map(|r| {
                (
                    format!(
                        "{}\u{1f}{}\u{1f}{} ÷ {}",
                        r.group,
                        r.mode(),
                        r.fencelock,
                        r.baseline
                    ),
                    spread_with(r.spread(), |x| format!("{x:.2}×")),
                )
            })
            .collect()
    });
    table(
        &["comparison", "mode", "fencelock ÷ baseline"],
        reports,
        rows,
    )
}

fn profile(reports: &[Report]) -> Table {
    let rows = merge(reports, |report| {
        report
            .file
            .results
            .profile
            .rows
            .iter()
            .map(|p| {
                let counts = |f: fn(&PerCommand) -> f64, decimals| {
                    p.counts
                        .as_ref()
                        .map_or("n/a".to_string(), |c| fixed(decimals)(f(c)))
                };
                (
                    p.label.clone(),
                    format!(
                        "{} / {} / {} µs / {} B",
                        counts(|c| c.instructions, 0),
                        counts(|c| c.allocations, 2),
                        fixed(2)(p.cpu_us),
                        fixed(1)(p.bytes_out)
                    ),
                )
            })
            .collect()
    });
    table(
        &["command (instructions / allocations / server CPU / reply bytes, per command)"],
        reports,
        rows,
    )
}

/// One server's rates: each baseline of each comparison against fencelock's variant.
fn server_table(report: &Report) -> Table {
    let mut table = Table::new(&["comparison", "mode", "fencelock", "baseline", "ratio"]);
    let results = &report.file.results;
    for group in &results.throughput {
        let Some((ours, baselines)) = group.series.split_first() else {
            continue;
        };
        let pipelined = group.depth > 1;
        let rates = |s: &Series| format!("{} {}", s.label, spread_with(spread(&s.samples), rate));
        for baseline in baselines {
            let ratio = report.file.ratios.iter().find(|r| {
                r.group == group.id && (r.depth > 1) == pipelined && r.baseline == baseline.label
            });
            table.row(vec![
                format!("{} ({})", group.title, group.unit),
                if pipelined {
                    "pipelined"
                } else {
                    "unpipelined"
                }
                .to_string(),
                rates(ours),
                rates(baseline),
                ratio.map_or("n/a".into(), |r| {
                    spread_with(r.spread(), |x| format!("{x:.2}×"))
                }),
            ]);
        }
    }
    let memory = &results.memory;
    table.row(vec![
        "memory per held lock (bytes)".into(),
        String::new(),
        format!(
            "fencelock {}",
            spread_with(spread(&memory.fencelock_held), fixed(1))
        ),
        format!(
            "SET NX PX {} (+ fence: key {})",
            spread_with(spread(&memory.set_held), fixed(1)),
            spread_with(spread(&memory.set_with_fence_held), fixed(1))
        ),
        String::new(),
    ]);
    let per_rep: Vec<f64> = memory
        .fencelock_held
        .iter()
        .zip(&memory.floor_held)
        .map(|(ours, floor)| ours / floor)
        .collect();
    // A report from before the floor rows has no floor memory figures: no row.
    if per_rep.is_empty() {
        return table;
    }
    table.row(vec![
        "memory per held lock (bytes), against the floor module".into(),
        String::new(),
        format!(
            "fencelock {}",
            spread_with(spread(&memory.fencelock_held), fixed(1))
        ),
        format!(
            "floor {}",
            spread_with(spread(&memory.floor_held), fixed(1))
        ),
        spread_with(spread(&per_rep), |x| format!("{x:.2}×")),
    ]);
    table
}

pub fn main(args: &[String]) -> io::Result<()> {
    let [out, dirs @ ..] = args else {
        return Err(io::Error::other("usage: combine OUT.md DIR..."));
    };
    if dirs.is_empty() {
        return Err(io::Error::other("usage: combine OUT.md DIR..."));
    }
    let reports = dirs
        .iter()
        .map(|dir| Report::read(Path::new(dir)))
        .collect::<io::Result<Vec<_>>>()?;
    let machine = &reports[0].file.results.machine;
    let sources: Vec<String> = reports
        .iter()
        .map(|r| format!("`{}`", r.dir.join("report.md").display()))
        .collect();
    let page = format!(
        "# fencelock benchmark on every server\n\n\
         Machine: {} × {}, {}, Linux {}; {}. One full run per server; every figure is a \
         ratio within that server's run (median [min–max] over alternating repetitions). \
         Each server's own report: {}.\n\n\
         ## Targets\n\n{}\n## Throughput ratios\n\n{}\n## Per command on the server\n\n{}{}",
        machine.cpus,
        machine.cpu,
        machine.os,
        machine.kernel,
        machine.placement,
        sources.join(", "),
        targets(&reports).markdown(),
        ratios(&reports).markdown(),
        profile(&reports).markdown(),
        reports
            .iter()
            .map(|r| format!("\n## {}\n\n{}", r.header(), server_table(r).markdown()))
            .collect::<String>(),
    );
    if let Some(parent) = Path::new(out).parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(out, &page)?;
    println!("{page}");
    eprintln!("wrote {out}");
    Ok(())
}
