//! The cost curves' part of the report: a table per family (operation × size → µs of
//! server CPU per operation, and the largest size's cost ÷ the smallest's), memory
//! per item, the idle server's share before and after, and the curves' targets — each
//! fencelock curve's growth at most 2× (O(1) or O(log n)), and no handoff leaving the
//! server's event loop busy.

use crate::report::common::{fixed, group_digits, spread_with, target, Table, Want};
use crate::report::section::{Section, Span};
use crate::results::curves::{CurvesResult, Family, Op};
use crate::results::Target;
use crate::stats::spread;

/// The chart's file name, beside report.md (and in docs/, beside the page).
pub const CHART_LINK: &str = "curves.svg";

/// Most a curve may grow from its smallest size to its largest.
const GROWTH: f64 = 2.0;
/// Most the idle server may take after handoffs, above its share before, in % of a
/// CPU: well above what its timers vary by (a few % at thousands of clients whose
/// buffers it is shrinking), well below an event loop that no longer sleeps (~100%).
const IDLE_EXCESS_PERCENT: f64 = 5.0;

fn growth_name(op: Op) -> String {
    format!(
        "cost curve, {}: {} (largest ÷ smallest size)",
        op.family().title(),
        op.label()
    )
}

const LONG_TIMER_NAME: &str =
    "cost curve, waiters on one key: idle server after handoffs under a one-hour lease, above its share before (% of a CPU)";

/// One target per fencelock curve, and the long-lease check; each listed whether or
/// not this run measured it.
pub fn targets(curves: Option<&CurvesResult>) -> Vec<Target> {
    let mut targets: Vec<Target> = Op::ALL
        .into_iter()
        .filter(|op| !op.is_reference())
        .map(|op| {
            let growth = curves.and_then(|c| c.curve(op)).and_then(|c| c.growth());
            target(growth_name(op), Want::AtMost(GROWTH), "×", growth)
        })
        .collect();
    let excess = curves
        .and_then(|c| c.long_timer.as_ref())
        .map(|check| vec![(check.idle_after - check.idle_before) * 100.0]);
    targets.push(target(
        LONG_TIMER_NAME.into(),
        Want::AtMost(IDLE_EXCESS_PERCENT),
        "%",
        excess,
    ));
    targets
}

fn with_unit(family: Family, n: u64) -> String {
    format!("{} {}", group_digits(n), family.unit(n))
}

fn verdict(targets: &[Target], name: &str) -> String {
    match targets.iter().find(|t| t.name == name).and_then(|t| t.met) {
        Some(true) => "met".into(),
        Some(false) => "**MISSED**".into(),
        None => "n/a".into(),
    }
}

/// The table of one family: a row per operation, a column per measured size.
pub fn family_table(curves: &CurvesResult, family: Family, targets: &[Target]) -> Table {
    let sizes = curves
        .sizes(family)
        .map(|s| s.measured.clone())
        .unwrap_or_default();
    let mut headers = vec!["operation".to_string(), "commands".to_string()];
    headers.extend(sizes.iter().map(|&n| with_unit(family, n)));
    headers.extend(["largest ÷ smallest".to_string(), "≤ 2×".to_string()]);
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut table = Table::new(&headers);
    for curve in curves.curves.iter().filter(|c| c.op.family() == family) {
        let mut row = vec![curve.command.clone(), curve.commands_per_op.to_string()];
        row.extend(sizes.iter().map(|&n| {
            curve
                .points
                .iter()
                .find(|p| p.size == n)
                .map_or("n/a".into(), |p| spread_with(spread(&p.samples), fixed(2)))
        }));
        row.push(curve.growth().map_or("n/a".into(), |g| {
            spread_with(spread(&g), |x| format!("{x:.2}×"))
        }));
        row.push(if curve.op.is_reference() {
            "(reference)".into()
        } else {
            verdict(targets, &growth_name(curve.op))
        });
        table.row(row);
    }
    table
}

pub fn memory_table(curves: &CurvesResult) -> Table {
    let mut table = Table::new(&["memory", "at", "bytes each"]);
    for m in &curves.memory {
        table.row(vec![
            m.what.clone(),
            with_unit(m.family, m.size),
            fixed(1)(m.bytes),
        ]);
    }
    // What waiting adds to a connection: the server's blocked-client state and
    // buffers, and the module's queue entry.
    let waiters: Vec<_> = curves
        .memory
        .iter()
        .filter(|m| m.family == Family::Waiters)
        .collect();
    if let [idle, waiting] = waiters.as_slice() {
        table.row(vec![
            "per waiter, beyond an idle connection".into(),
            with_unit(waiting.family, waiting.size),
            fixed(1)(waiting.bytes - idle.bytes),
        ]);
    }
    table
}

/// What the run did, the sizes it could not reach and the idle server around it.
fn notes(curves: &CurvesResult) -> Vec<Vec<Span>> {
    let plain = |s: String| vec![Span::Plain(s)];
    let mut notes = vec![plain(format!(
        "Server CPU per operation in µs (its event loop's, /proc/<pid>/schedstat), median \
         [min–max] over repetitions; {} operations a run ({} commands in flight), {} handoffs, \
         {} waiters joining and leaving; each size on a server of its own; the idle server's \
         share of a CPU at that size is taken off each run pro rata of its wall time.",
        group_digits(curves.ops),
        curves.depth,
        group_digits(curves.handoffs),
        group_digits(curves.joins)
    ))];
    for sizes in &curves.sizes {
        if let Some(why) = &sizes.capped {
            notes.push(plain(format!("{}: {why}.", sizes.family.title())));
        }
        let shares = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{:.1}%", x * 100.0))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let busier = sizes
            .idle_cpu_share
            .iter()
            .zip(&sizes.idle_after_cpu_share)
            .any(|(before, after)| after - before > IDLE_EXCESS_PERCENT / 100.0);
        notes.push(plain(format!(
            "{}: idle server {} of a CPU before the runs at each size, {} after{}.",
            sizes.family.title(),
            shares(&sizes.idle_cpu_share),
            shares(&sizes.idle_after_cpu_share),
            if busier {
                " — busier after: an operation left the event loop running, and the figures after it include that"
            } else {
                ""
            }
        )));
    }
    if let Some(check) = &curves.long_timer {
        let mut note = vec![Span::Plain(format!(
            "Waiters under a {}-minute lease ({} waiters, {} handoffs): the idle server took \
             {:.1}% of a CPU before the handoffs and {:.1}% after",
            check.lease_ms / 60_000,
            check.waiters,
            check.handoffs,
            check.idle_before * 100.0,
            check.idle_after * 100.0,
        ))];
        if check.idle_after - check.idle_before > IDLE_EXCESS_PERCENT / 100.0 {
            note.extend([
                Span::Plain(
                    ": the event loop no longer sleeps while they wait (the module times the \
                     next handoff for the lease's end, and on Redis 7.0 a module timer more \
                     than 2^31 µs, 35.8 minutes, away overflows the loop's "
                        .into(),
                ),
                Span::Code("int".into()),
                Span::Plain(format!(
                    " arithmetic); the curves use {}-minute leases",
                    curves.lease_ms / 60_000
                )),
            ]);
        }
        note.push(Span::Plain(".".into()));
        notes.push(note);
    }
    notes
}

fn family_heading(curves: &CurvesResult, family: Family) -> String {
    let sizes = curves
        .sizes(family)
        .map(|s| s.measured.clone())
        .unwrap_or_default();
    let listed: Vec<String> = sizes.iter().map(|&n| group_digits(n)).collect();
    format!(
        "Cost as the {} grow ({})",
        family.title(),
        listed.join(" / ")
    )
}

/// The section (report.md and docs/performance.md's `{{curves}}`, and on stdout);
/// `chart` is the path the SVG is linked under in markdown.
pub fn section(curves: Option<&CurvesResult>, targets: &[Target], chart: &str) -> Section {
    let Some(curves) = curves else {
        return Section::not_measured("the curves");
    };
    let mut section = notes(curves).into_iter().fold(
        Section::new().image("cost curves, log-log", chart),
        Section::remark_spans,
    );
    for family in Family::ALL {
        let heading = family_heading(curves, family);
        section = section
            .heading(heading.clone(), heading)
            .table(family_table(curves, family, targets));
    }
    section
        .heading("Memory per item", "MEMORY")
        .table(memory_table(curves))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::section::Format;
    use crate::results::curves::{Curve, LongTimerCheck, Memory, Point, Sizes};

    fn curves() -> CurvesResult {
        let point = |size, samples: Vec<f64>| Point { size, samples };
        CurvesResult {
            sizes: vec![Sizes {
                family: Family::Holders,
                planned: vec![1, 100, 10_000],
                measured: vec![1, 100, 10_000],
                capped: None,
                idle_cpu_share: vec![0.001, f64::NAN, 0.002],
                idle_after_cpu_share: vec![0.001, 0.001, 0.002],
            }],
            ops: 10_000,
            handoffs: 2_000,
            joins: 1_000,
            depth: 32,
            lease_ms: 600_000,
            curves: vec![
                Curve {
                    op: Op::RefreshHolder,
                    command: Op::RefreshHolder.label().into(),
                    commands_per_op: 1,
                    points: vec![
                        point(1, vec![1.0, 1.5, 2.0]),
                        point(100, vec![1.2, 1.5, 2.0]),
                        point(10_000, vec![3.0, 3.5, 2.0]),
                    ],
                },
                Curve {
                    op: Op::InfoSemaphore,
                    command: Op::InfoSemaphore.label().into(),
                    commands_per_op: 1,
                    points: vec![point(1, vec![2.0; 3]), point(10_000, vec![2.2; 3])],
                },
            ],
            memory: vec![Memory {
                what: "per holder of one semaphore".into(),
                family: Family::Holders,
                size: 10_000,
                bytes: 143.0,
            }],
            long_timer: Some(LongTimerCheck {
                waiters: 2,
                handoffs: 10,
                lease_ms: 3_600_000,
                idle_before: 0.001,
                idle_after: 0.9,
            }),
        }
    }

    /// Growth is taken repetition by repetition, judged on its median; a curve the
    /// run did not measure is listed as not applicable, not left out.
    #[test]
    fn each_curve_is_judged_on_its_growth_and_none_is_left_out() {
        let curves = curves();
        let growth = curves.curve(Op::RefreshHolder).unwrap().growth().unwrap();
        assert_eq!(growth, vec![3.0, 3.5 / 1.5, 1.0]);
        let targets = targets(Some(&curves));
        let judged = |name: &str| targets.iter().find(|t| t.name == name).map(|t| t.met);
        assert_eq!(judged(&growth_name(Op::RefreshHolder)), Some(Some(false)));
        assert_eq!(judged(&growth_name(Op::InfoSemaphore)), Some(Some(true)));
        assert_eq!(judged(&growth_name(Op::Handoff)), Some(None));
        assert_eq!(judged(LONG_TIMER_NAME), Some(Some(false)));
        // Every fencelock curve and the long-lease check: none left out.
        assert_eq!(targets.len(), Op::ALL.len() - 1 + 1);
        assert!(super::targets(None).iter().all(|t| t.met.is_none()));
    }

    #[test]
    fn curves_read_back_from_json_and_render() {
        let curves = curves();
        let json = serde_json::to_string(&curves).unwrap();
        let back: CurvesResult = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert!(back.sizes[0].idle_cpu_share[1].is_nan());
        let text = section(Some(&back), &[], CHART_LINK).render(Format::Text);
        assert!(text.contains("10,000 holders"), "{text}");
        assert!(text.contains("3.00×"), "{text}");
        let page = section(Some(&back), &[], CHART_LINK).render(Format::Markdown);
        assert!(page.contains("no longer sleeps"), "{page}");
        assert!(crate::report::curves_chart::chart(
            &back,
            &crate::results::machine::Machine {
                cpu: "CPU".into(),
                cpus: 2,
                memory_gib: 24.0,
                os: "OS".into(),
                kernel: "6.1".into(),
                server: "redis-7.0".into(),
                redis: "Redis 7.0.15".into(),
                server_binary: "redis-server".into(),
                module: "libfencelock.so".into(),
                floor_module: "libfencelock_floor.so".into(),
                placement: "not pinned".into(),
            }
        )
        .unwrap()
        .starts_with("<svg"));
    }
}
