//! `make bench-all`'s last step: `combine OUT.md DIR…` reads the `report.json` each
//! server's run left in its directory and writes one markdown page: tables with a
//! column per server — the targets (met or missed), every throughput ratio and the
//! per-command profile — so that servers can be compared line by line, then one
//! throughput and memory table per server with its rates. Each comparison stays a
//! ratio measured within one server's run: rates are not comparable across servers.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::report::table::{fixed, rate, spread_with, Table};
use crate::stats::Spread;

struct Report {
    dir: PathBuf,
    json: Value,
}

impl Report {
    fn read(dir: &Path) -> io::Result<Self> {
        let path = dir.join("report.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        let json = serde_json::from_str(&text)
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            json,
        })
    }

    fn header(&self) -> String {
        let machine = &self.json["machine"];
        format!(
            "{} ({})",
            machine["server"].as_str().unwrap_or("?"),
            machine["redis"].as_str().unwrap_or("?")
        )
    }

    fn array(&self, key: &str) -> &[Value] {
        self.json[key].as_array().map_or(&[], Vec::as_slice)
    }
}

fn spread_of(summary: &Value) -> Spread {
    let get = |k: &str| summary[k].as_f64().unwrap_or(f64::NAN);
    Spread {
        median: get("median"),
        min: get("min"),
        max: get("max"),
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
            .array("targets")
            .iter()
            .map(|t| {
                let decimals = t["decimals"].as_u64().unwrap_or(2) as usize;
                let unit = t["unit"].as_str().unwrap_or("");
                let cell = match t["met"].as_bool() {
                    None => "n/a".to_string(),
                    Some(met) => format!(
                        "{}{unit} {}",
                        spread_with(spread_of(&t["measured"]), fixed(decimals)),
                        if met { "met" } else { "**MISSED**" }
                    ),
                };
                (
                    format!(
                        "{}\u{1f}{}",
                        t["name"].as_str().unwrap_or("?"),
                        t["wanted"].as_str().unwrap_or("?")
                    ),
                    cell,
                )
            })
            .collect()
    });
    table(&["target", "wanted"], reports, rows)
}

fn ratios(reports: &[Report]) -> Table {
    let rows = merge(reports, |report| {
        report
            .array("ratios")
            .iter()
            .map(|r| {
                let text = |k: &str| r[k].as_str().unwrap_or("?").to_string();
                (
                    format!(
                        "{}\u{1f}{}\u{1f}{} ÷ {}",
                        text("group"),
                        text("mode"),
                        text("fencelock"),
                        text("baseline")
                    ),
                    spread_with(spread_of(&r["ratio"]["summary"]), |x| format!("{x:.2}×")),
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
        report.json["profile"]["per_command"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|p| {
                let number = |k: &str, decimals: usize| {
                    p[k].as_f64()
                        .map_or("n/a".to_string(), |x| fixed(decimals)(x))
                };
                (
                    p["command"].as_str().unwrap_or("?").to_string(),
                    format!(
                        "{} / {} / {} µs / {} B",
                        number("instructions", 0),
                        number("allocations", 2),
                        number("server_cpu_us", 2),
                        number("reply_bytes", 1)
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
    let ratios = report.array("ratios");
    for group in report.array("throughput") {
        let series = group["series"].as_array().map_or(&[][..], Vec::as_slice);
        let Some((ours, baselines)) = series.split_first() else {
            continue;
        };
        let mode = if group["pipeline_depth"].as_u64().unwrap_or(1) > 1 {
            "pipelined"
        } else {
            "unpipelined"
        };
        let rates = |s: &Value| {
            format!(
                "{} {}",
                s["label"].as_str().unwrap_or("?"),
                spread_with(spread_of(&s["per_second"]["summary"]), rate)
            )
        };
        for baseline in baselines {
            let ratio = ratios.iter().find(|r| {
                r["group"] == group["group"]
                    && r["mode"] == mode
                    && r["baseline"] == baseline["label"]
            });
            table.row(vec![
                format!(
                    "{} ({})",
                    group["title"].as_str().unwrap_or("?"),
                    group["unit"].as_str().unwrap_or("?")
                ),
                mode.to_string(),
                rates(ours),
                rates(baseline),
                ratio.map_or("n/a".into(), |r| {
                    spread_with(spread_of(&r["ratio"]["summary"]), |x| format!("{x:.2}×"))
                }),
            ]);
        }
    }
    let memory = &report.json["memory"];
    table.row(vec![
        "memory per held lock (bytes)".into(),
        String::new(),
        format!(
            "fencelock {}",
            spread_with(
                spread_of(&memory["bytes_per_held_lock"]["fencelock"]["summary"]),
                fixed(1)
            )
        ),
        format!(
            "SET NX PX {} (+ fence: key {})",
            spread_with(
                spread_of(&memory["bytes_per_held_lock"]["set_nx_px"]["summary"]),
                fixed(1)
            ),
            spread_with(
                spread_of(&memory["bytes_per_held_lock"]["set_nx_px_with_fence_key"]["summary"]),
                fixed(1)
            )
        ),
        String::new(),
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
    let machine = &reports[0].json["machine"];
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
        machine["cpus"],
        machine["cpu"].as_str().unwrap_or("?"),
        machine["os"].as_str().unwrap_or("?"),
        machine["kernel"].as_str().unwrap_or("?"),
        machine["placement"].as_str().unwrap_or("?"),
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
