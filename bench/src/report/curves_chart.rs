//! The cost curves' chart (curves.svg), drawn with `plotters`: one log-log panel per
//! family — size along x, µs of server CPU per operation along y, a line per
//! operation through its medians with a min–max whisker at each size, and a dashed
//! line at twice its cost at the smallest size (the target: a curve that stays below
//! its dashed line is O(1) or O(log n) over these sizes) — then the machine.

use std::io;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::report::common::group_digits;
use crate::results::curves::{CurvesResult, Family};
use crate::results::machine::Machine;
use crate::stats::spread;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

const WIDTH: u32 = 960;
const PANEL_HEIGHT: u32 = 330;
const FOOTER_HEIGHT: u32 = 40;
/// Width of the legend beside each panel.
const LEGEND_WIDTH: u32 = 360;
const PALETTE: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// Powers of ten and their 2× and 5× within `lo..hi`: the y axis's labels.
fn one_two_five(lo: f64, hi: f64) -> Vec<f64> {
    let mut points = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for step in [1.0, 2.0, 5.0] {
            let y = decade * step;
            if y >= lo && y <= hi {
                points.push(y);
            }
        }
        decade *= 10.0;
    }
    points
}

fn panel(area: &Area, curves: &CurvesResult, family: Family) -> Drawn {
    let (plot, legend) = area.split_horizontally(WIDTH - LEGEND_WIDTH);
    let lines: Vec<_> = curves
        .curves
        .iter()
        .filter(|c| c.op.family() == family)
        .collect();
    let sizes = curves
        .sizes(family)
        .map(|s| s.measured.clone())
        .unwrap_or_default();
    let finite = |x: &f64| x.is_finite() && *x > 0.0;
    let all: Vec<f64> = lines
        .iter()
        .flat_map(|c| c.points.iter().flat_map(|p| p.samples.iter().copied()))
        .chain(
            lines
                .iter()
                .filter_map(|c| c.points.first().map(|p| 2.0 * spread(&p.samples).median)),
        )
        .filter(finite)
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (lo / 1.3, hi * 1.3)
    } else {
        (0.1, 10.0)
    };
    let x_lo = (*sizes.first().unwrap_or(&1)).max(1) as f64;
    let x_hi = (*sizes.last().unwrap_or(&10)).max(2) as f64;
    let x_range = (x_lo / 2.0)..(x_hi * 2.0);
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!("Cost as the {} grow", family.title()),
            ("sans-serif", 14),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(
            x_range
                .log_scale()
                .with_key_points(sizes.iter().map(|&n| n as f64).collect::<Vec<_>>()),
            (lo..hi).log_scale().with_key_points(one_two_five(lo, hi)),
        )?;
    chart
        .configure_mesh()
        .x_desc(format!("{} (log)", family.unit(2)))
        .y_desc("server CPU µs per operation (log)")
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|x| group_digits(x.round() as u64))
        .y_label_formatter(&|y| format!("{y}"))
        .label_style(("sans-serif", 11))
        .draw()?;
    let small = TextStyle::from(("sans-serif", 11.5)).color(&BLACK);
    for (i, curve) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let medians: Vec<(f64, f64)> = curve
            .points
            .iter()
            .map(|p| (p.size.max(1) as f64, spread(&p.samples).median))
            .filter(|(_, y)| finite(y))
            .collect();
        chart.draw_series(LineSeries::new(medians.clone(), color.stroke_width(2)))?;
        chart.draw_series(
            medians
                .iter()
                .map(|&point| Circle::new(point, 3, color.filled())),
        )?;
        for p in &curve.points {
            let s = spread(&p.samples);
            if finite(&s.min) && finite(&s.max) {
                let x = p.size.max(1) as f64;
                chart.draw_series([PathElement::new(
                    [(x, s.min.max(lo)), (x, s.max.min(hi))],
                    color.stroke_width(1),
                )])?;
            }
        }
        if let (Some(&(_, first)), false) = (medians.first(), curve.op.is_reference()) {
            chart.draw_series([DashedPathElement::new(
                [(x_lo, 2.0 * first), (x_hi, 2.0 * first)],
                3,
                4,
                color.mix(0.6).stroke_width(1),
            )])?;
        }
        // The legend: each operation with its growth, largest ÷ smallest size.
        let growth = curve
            .growth()
            .map_or("n/a".into(), |g| format!("{:.2}×", spread(&g).median));
        let y = 40 + 48 * i as i32;
        legend.draw(&PathElement::new(
            vec![(4, y + 6), (28, y + 6)],
            color.stroke_width(3),
        ))?;
        legend.draw_text(&curve.command, &small, (34, y))?;
        legend.draw_text(
            &format!(
                "{}: {growth} from the smallest size to the largest",
                if curve.op.is_reference() {
                    "reference"
                } else {
                    "target ≤ 2×"
                }
            ),
            &small.color(&RGBColor(0x55, 0x55, 0x55)),
            (34, y + 16),
        )?;
    }
    Ok(())
}

fn draw(area: &Area, curves: &CurvesResult, machine: &Machine) -> Drawn {
    area.fill(&WHITE)?;
    let (panels, footer) = area.split_vertically(PANEL_HEIGHT * Family::ALL.len() as u32);
    for (area, family) in panels
        .split_evenly((Family::ALL.len(), 1))
        .iter()
        .zip(Family::ALL)
    {
        panel(area, curves, family)?;
    }
    let m = machine;
    let line = format!(
        "{} × {}, {:.0} GiB RAM, {}, Linux {}, {}; dashed: 2× the cost at the smallest size",
        m.cpus, m.cpu, m.memory_gib, m.os, m.kernel, m.redis
    );
    let small = TextStyle::from(("sans-serif", 10.5)).color(&RGBColor(0x44, 0x44, 0x44));
    footer.draw_text(&line, &small, (20, 4))?;
    footer.draw_text(&m.placement, &small, (20, 18))?;
    area.present()?;
    Ok(())
}

pub fn chart(curves: &CurvesResult, machine: &Machine) -> io::Result<String> {
    let height = PANEL_HEIGHT * Family::ALL.len() as u32 + FOOTER_HEIGHT;
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        draw(&area, curves, machine).map_err(|e| io::Error::other(format!("curves.svg: {e}")))?;
    }
    Ok(svg)
}
