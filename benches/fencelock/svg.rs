//! The chart, as a self-contained SVG: (a) throughput ratios fencelock ÷ baseline,
//! median bar with min–max whisker and the target marked; (b) the distribution of the
//! wait from ask to grant, fencelock BLOCK against polling, one plot per client count
//! (cumulative fraction over a log time axis, all repetitions pooled).

use std::fmt::Write;

use crate::contender::Mode;
use crate::results::{Ratio, Results};

const WIDTH: f64 = 960.0;
const ROW: f64 = 22.0;
const LABEL_RIGHT: f64 = 365.0;
const PLOT_LEFT: f64 = 375.0;
const PLOT_RIGHT: f64 = 900.0;
const WAIT_HEIGHT: f64 = 250.0;

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The issue's target for a ratio, if it has one.
fn target_for(r: &Ratio) -> Option<f64> {
    match (r.group, r.depth > 1, r.baseline) {
        ("acquire", true, "SET NX PX") => Some(0.9),
        ("acquire", true, "SET NX PX + INCR fence") => Some(1.5),
        ("release", true, _) | ("refresh", true, _) => Some(2.5),
        ("cycle", true, _) => Some(2.0),
        ("cycle", false, _) => Some(1.4),
        _ => None,
    }
}

fn mode_color(mode: Mode) -> &'static str {
    match mode {
        Mode::Block => "#1a9850",
        Mode::Poll { retry_ms } if retry_ms >= 50 => "#d73027",
        Mode::Poll { .. } => "#f46d43",
    }
}

fn ratios_panel(svg: &mut String, ratios: &[Ratio], top: f64) -> f64 {
    let highest = ratios
        .iter()
        .flat_map(|r| [r.spread.max, target_for(r).unwrap_or(0.0)])
        .filter(|x| x.is_finite())
        .fold(3.0_f64, f64::max);
    let x_max = (highest * 1.1 * 2.0).ceil() / 2.0;
    let x = |v: f64| PLOT_LEFT + (v.clamp(0.0, x_max) / x_max) * (PLOT_RIGHT - PLOT_LEFT);
    let _ = writeln!(
        svg,
        r#"<text x="20" y="{:.0}" class="title">Throughput, fencelock ÷ Lua pattern (same run; bar = median, whisker = min–max, red tick = target)</text>"#,
        top + 18.0
    );
    let plot_top = top + 34.0;
    let plot_bottom = plot_top + ROW * ratios.len() as f64;
    let step = if x_max <= 4.0 { 0.5 } else { 1.0 };
    let mut tick = 0.0;
    while tick <= x_max + 1e-9 {
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" y1="{plot_top:.1}" x2="{0:.1}" y2="{plot_bottom:.1}" stroke="#e5e5e5"/><text x="{0:.1}" y="{1:.1}" class="tick" text-anchor="middle">{tick}×</text>"##,
            x(tick),
            plot_bottom + 14.0
        );
        tick += step;
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{0:.1}" y1="{plot_top:.1}" x2="{0:.1}" y2="{plot_bottom:.1}" stroke="#555" stroke-dasharray="4 3"/>"##,
        x(1.0)
    );
    for (i, r) in ratios.iter().enumerate() {
        let y = plot_top + ROW * i as f64;
        let color = if r.depth > 1 { "#2b7bb9" } else { "#9ecae1" };
        let label = format!("{}, {}: vs {}", r.group, r.mode(), r.baseline);
        let _ = writeln!(
            svg,
            r##"<text x="{LABEL_RIGHT}" y="{:.1}" class="label" text-anchor="end">{}</text><rect x="{PLOT_LEFT}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#222" stroke-width="1.5"/><text x="{:.1}" y="{:.1}" class="value">{:.2}×</text>"##,
            y + ROW * 0.68,
            esc(&label),
            y + 4.0,
            (x(r.spread.median) - PLOT_LEFT).max(0.0),
            ROW - 8.0,
            x(r.spread.min),
            y + ROW / 2.0,
            x(r.spread.max),
            y + ROW / 2.0,
            x(r.spread.max) + 5.0,
            y + ROW * 0.68,
            r.spread.median
        );
        if let Some(target) = target_for(r) {
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#d62728" stroke-width="2.5"><title>target ≥ {target}×</title></line>"##,
                x(target),
                y + 1.0,
                y + ROW - 1.0
            );
        }
    }
    let legend_y = plot_bottom + 32.0;
    for (i, (color, text)) in [
        ("#2b7bb9", "pipelined, 32 deep"),
        ("#9ecae1", "unpipelined"),
    ]
    .into_iter()
    .enumerate()
    {
        let lx = PLOT_LEFT + 170.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{lx}" y="{:.1}" width="14" height="10" fill="{color}"/><text x="{}" y="{legend_y:.1}" class="label">{text}</text>"#,
            legend_y - 9.0,
            lx + 20.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{LABEL_RIGHT}" y="{legend_y:.1}" class="label" text-anchor="end">fencelock's rate ÷ the baseline's:</text>"#
    );
    legend_y + 24.0
}

/// Cumulative-distribution points of an ascending sample, at most ~200.
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let steps = n.min(200);
    (0..=steps)
        .filter_map(|k| {
            let idx = (k * n / steps.max(1)).min(n.saturating_sub(1));
            sorted.get(idx).map(|&v| (v, (idx + 1) as f64 / n as f64))
        })
        .collect()
}

fn wait_panel(svg: &mut String, results: &Results, top: f64) -> f64 {
    let all: Vec<f64> = results
        .contention
        .iter()
        .flat_map(|c| c.samples.iter().flat_map(|s| s.waits_ms.iter().copied()))
        .filter(|w| *w > 0.0)
        .collect();
    let lo = all
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .log10()
        .floor()
        .clamp(-2.0, 0.0);
    let hi = all
        .iter()
        .copied()
        .fold(1.0, f64::max)
        .log10()
        .ceil()
        .max(lo + 2.0);
    let _ = writeln!(
        svg,
        r#"<text x="20" y="{:.0}" class="title">Wait from ask to grant (cumulative share of grants; log time axis; all repetitions)</text>"#,
        top + 18.0
    );
    let counts = &results.settings.contention_clients;
    let panel_width = (WIDTH - 60.0) / counts.len().max(1) as f64;
    let plot_top = top + 60.0;
    for (p, &clients) in counts.iter().enumerate() {
        let left = 60.0 + panel_width * p as f64;
        let right = left + panel_width - 50.0;
        let bottom = plot_top + WAIT_HEIGHT;
        let x = |ms: f64| left + (ms.max(10f64.powf(lo)).log10() - lo) / (hi - lo) * (right - left);
        let y = |share: f64| bottom - share * WAIT_HEIGHT;
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" class="subtitle" text-anchor="middle">{clients} clients</text><rect x="{left:.1}" y="{plot_top:.1}" width="{:.1}" height="{WAIT_HEIGHT}" fill="none" stroke="#999"/>"##,
            (left + right) / 2.0,
            plot_top - 8.0,
            right - left
        );
        let mut decade = lo;
        while decade <= hi + 1e-9 {
            let value = 10f64.powf(decade);
            let label = if value < 1.0 {
                format!("{value}")
            } else {
                format!("{value:.0}")
            };
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" y1="{plot_top:.1}" x2="{0:.1}" y2="{bottom:.1}" stroke="#e5e5e5"/><text x="{0:.1}" y="{1:.1}" class="tick" text-anchor="middle">{label}</text>"##,
                x(value),
                bottom + 14.0
            );
            decade += 1.0;
        }
        for share in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
            let _ = writeln!(
                svg,
                r##"<line x1="{left:.1}" y1="{0:.1}" x2="{right:.1}" y2="{0:.1}" stroke="#eeeeee"/><text x="{1:.1}" y="{2:.1}" class="tick" text-anchor="end">{3}%</text>"##,
                y(share),
                left - 4.0,
                y(share) + 4.0,
                share * 100.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">wait (ms)</text>"#,
            (left + right) / 2.0,
            bottom + 30.0
        );
        for entry in results.contention.iter().filter(|c| c.clients == clients) {
            let mut waits: Vec<f64> = entry
                .samples
                .iter()
                .flat_map(|s| s.waits_ms.iter().copied())
                .collect();
            waits.sort_by(f64::total_cmp);
            let points: Vec<String> = cdf_points(&waits)
                .into_iter()
                .map(|(ms, share)| format!("{:.1},{:.1}", x(ms), y(share)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
                mode_color(entry.mode),
                points.join(" ")
            );
        }
    }
    let legend_y = top + 36.0;
    for (i, mode) in crate::contention::MODES.iter().enumerate() {
        let lx = 60.0 + 200.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{legend_y}" x2="{}" y2="{legend_y}" stroke="{}" stroke-width="3"/><text x="{}" y="{}" class="label">{}</text>"#,
            lx + 24.0,
            mode_color(*mode),
            lx + 30.0,
            legend_y + 4.0,
            esc(&mode.label())
        );
    }
    plot_top + WAIT_HEIGHT + 50.0
}

pub fn chart(results: &Results) -> String {
    let ratios = results.ratios();
    let mut body = String::new();
    let after_ratios = ratios_panel(&mut body, &ratios, 10.0);
    let plots_end = wait_panel(&mut body, results, after_ratios);
    let height = plots_end + 26.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="Helvetica, Arial, sans-serif">
<style>.title{{font-size:14px;font-weight:bold}} .subtitle{{font-size:13px}} .label{{font-size:11.5px}} .tick{{font-size:10.5px;fill:#444}} .value{{font-size:11px}}</style>
<rect width="100%" height="100%" fill="white"/>"##
    );
    svg += &body;
    let m = &results.machine;
    let _ = writeln!(
        svg,
        r##"<text x="20" y="{:.0}" class="tick">{}</text><text x="20" y="{:.0}" class="tick">{}</text>"##,
        plots_end + 4.0,
        esc(&format!(
            "{} × {}, {:.0} GiB RAM, {}, Linux {}, {}",
            m.cpus, m.cpu, m.memory_gib, m.os, m.kernel, m.redis
        )),
        plots_end + 18.0,
        esc(&m.placement)
    );
    svg += "</svg>\n";
    svg
}
