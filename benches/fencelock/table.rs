//! A plain table rendered two ways: aligned text for the terminal and GitHub
//! markdown for the reports; plus the number formats both use.

use crate::stats::Spread;

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
        let mut out = format!("| {} |\n", self.headers.join(" | "));
        out += &format!("|{}\n", "---|".repeat(self.headers.len()));
        for row in &self.rows {
            out += &format!("| {} |\n", row.join(" | "));
        }
        out
    }

    pub fn text(&self) -> String {
        let width = |i: usize| {
            std::iter::once(&self.headers)
                .chain(&self.rows)
                .filter_map(|row| row.get(i))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.headers.len()).map(width).collect();
        let line = |row: &Vec<String>| {
            row.iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell}{}", " ".repeat(w - cell.chars().count())))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let mut out = line(&self.headers) + "\n";
        out += &(widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ")
            + "\n");
        for row in &self.rows {
            out += &(line(row) + "\n");
        }
        out
    }
}

/// 1.23M, 456.7k, 812.
pub fn rate(x: f64) -> String {
    if !x.is_finite() {
        "n/a".into()
    } else if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.0}k", x / 1e3)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// `median [min–max]` with each number formatted by `f`.
pub fn spread_with(s: Spread, f: impl Fn(f64) -> String) -> String {
    format!("{} [{}–{}]", f(s.median), f(s.min), f(s.max))
}

pub fn fixed(decimals: usize) -> impl Fn(f64) -> String {
    move |x| {
        if x.is_finite() {
            // No "-0.0": a value that rounds to zero prints as zero.
            let x = if x.abs() < 0.5 * 10f64.powi(-(decimals as i32)) {
                0.0
            } else {
                x
            };
            format!("{x:.decimals$}")
        } else {
            "n/a".into()
        }
    }
}

/// Milliseconds with precision that suits the size.
pub fn ms(x: f64) -> String {
    if !x.is_finite() {
        "n/a".into()
    } else if x < 10.0 {
        format!("{x:.2}")
    } else if x < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}
