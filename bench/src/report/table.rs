//! A plain table rendered two ways: aligned text for the terminal and GitHub markdown
//! for the reports; plus the number formats both use. Hand-written because none of
//! the benchmark's dependencies renders tables and these two layouts are all it needs.

use crate::stats::{spread, Spread};

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
