//! The pieces every part of the report is made of, below all of them: the plain
//! table (aligned text for the terminal, GitHub markdown for the reports; hand-written
//! because none of the benchmark's dependencies renders tables and these two layouts are
//! all it needs), the number formats, a target judged on a run's figures, the two
//! tables more than one section shows (fencelock against its baselines, and targets),
//! and the columns of a contention sample that more than one table shows.

use crate::results::contention::Sample;
use crate::results::throughput::GroupResult;
use crate::results::{group_ratios, Target};
use crate::stats::{spread, Spread};

#[derive(Clone)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let rule = format!("|{}\n", "---|".repeat(self.headers.len()));
        let rows: String = self.rows.iter().map(|row| line(row)).collect();
        line(&self.headers) + &rule + &rows
    }

    pub fn text(&self) -> String {
        let all = || std::iter::once(&self.headers).chain(&self.rows);
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                all()
                    .filter_map(|row| row.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        let line = |row: &Vec<String>| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, &w)| format!("{cell:w$}"))
                .collect();
            cells.join("  ").trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers) + &line(&rule);
        self.rows.iter().for_each(|row| out += &line(row));
        out
    }
}

/// 1.23M, 456.7k, 812.
pub fn rate(x: f64) -> String {
    match x {
        _ if !x.is_finite() => "n/a".into(),
        _ if x >= 1e6 => format!("{:.2}M", x / 1e6),
        _ if x >= 1e4 => format!("{:.0}k", x / 1e3),
        _ if x >= 1e3 => format!("{:.1}k", x / 1e3),
        _ => format!("{x:.0}"),
    }
}

/// `median [min–max]` with each number formatted by `f`.
pub fn spread_with(s: Spread, f: impl Fn(f64) -> String) -> String {
    format!("{} [{}–{}]", f(s.median), f(s.min), f(s.max))
}

pub fn fixed(decimals: usize) -> impl Fn(f64) -> String {
    move |x| match x {
        _ if !x.is_finite() => "n/a".into(),
        // No "-0.0": a value that rounds to zero prints as zero.
        _ if x.abs() < 0.5 * 10f64.powi(-(decimals as i32)) => format!("{:.decimals$}", 0.0),
        _ => format!("{x:.decimals$}"),
    }
}

/// Milliseconds with precision that suits the size.
pub fn ms(x: f64) -> String {
    match x {
        _ if !x.is_finite() => "n/a".into(),
        _ if x < 10.0 => format!("{x:.2}"),
        _ if x < 100.0 => format!("{x:.1}"),
        _ => format!("{x:.0}"),
    }
}

/// `median [min–max]` of a set of repetitions, `decimals` after the point.
pub fn cell(samples: &[f64], decimals: usize) -> String {
    spread_with(spread(samples), fixed(decimals))
}

/// `median× [min×–max×]` of a ratio's repetitions.
pub fn times(samples: &[f64]) -> String {
    spread_with(spread(samples), |x| {
        if x.is_finite() {
            format!("{x:.3}×")
        } else {
            "n/a".into()
        }
    })
}

/// Each repetition's figure, in the order measured.
pub fn each(samples: &[f64]) -> String {
    let figures: Vec<String> = samples.iter().map(|x| format!("{x:.3}")).collect();
    figures.join(", ")
}

/// 1000000 → "1,000,000".
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What a target wants of its figure.
#[derive(Clone, Copy)]
pub enum Want {
    AtLeast(f64),
    AtMost(f64),
    /// Strictly less than.
    Below(f64),
    /// Rounds to zero at the unit's precision (|x| < 0.5).
    Zero,
}

impl Want {
    fn describe(self, unit: &str) -> String {
        match self {
            Want::AtLeast(x) => format!("≥ {x}{unit}"),
            Want::AtMost(x) => format!("≤ {x}{unit}"),
            Want::Below(x) => format!("< {x}{unit}"),
            Want::Zero => format!("0{unit}"),
        }
    }

    fn met(self, value: f64) -> bool {
        match self {
            Want::AtLeast(x) => value >= x,
            Want::AtMost(x) => value <= x,
            Want::Below(x) => value < x,
            Want::Zero => value.abs() < 0.5,
        }
    }
}

/// A target judged on the median of its repetitions' figures; `None` (not measured in
/// this run) lists it as not applicable rather than dropping it.
pub fn target(name: String, want: Want, unit: &'static str, samples: Option<Vec<f64>>) -> Target {
    let samples = samples.unwrap_or_default();
    let measured = spread(&samples);
    let decimals = match (want, unit) {
        (_, " B") | (Want::Zero, _) => 1,
        (Want::AtLeast(x), "") if x < 1.0 => 3,
        _ => 2,
    };
    Target {
        name,
        wanted: want.describe(unit),
        met: (!samples.is_empty()).then(|| want.met(measured.median)),
        measured,
        unit: unit.to_string(),
        decimals,
    }
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
                row.push(self::each(&ratio.samples));
            }
            table.row(row);
        }
    }
    table
}

/// The targets, each with what it wants, its median [min–max] and its verdict.
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

/// The headers of a contention sample's figures, after a table's own (`sample_cells`).
pub const SAMPLE_HEADERS: [&str; 6] = [
    "grants/s",
    "wait p50 ms",
    "wait p99 ms",
    "wait max ms",
    "failed attempts/grant",
    "Jain",
];

/// The repetitions of one contention measurement as the cells under `SAMPLE_HEADERS`:
/// each figure's spread over them.
pub fn sample_cells(samples: &[Sample]) -> Vec<String> {
    let column = |f: fn(&Sample) -> f64| spread(&samples.iter().map(f).collect::<Vec<_>>());
    vec![
        spread_with(column(|s| s.grants_per_s), fixed(0)),
        spread_with(column(|s| s.p50_ms), ms),
        spread_with(column(|s| s.p99_ms), ms),
        spread_with(column(|s| s.max_ms), ms),
        spread_with(column(|s| s.failed_per_grant), fixed(2)),
        spread_with(column(|s| s.jain), fixed(3)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_grouped_by_thousands() {
        assert_eq!(group_digits(1), "1");
        assert_eq!(group_digits(1_000), "1,000");
        assert_eq!(group_digits(100_000), "100,000");
        assert_eq!(group_digits(1_000_000), "1,000,000");
    }
}
