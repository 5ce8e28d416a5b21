//! The targets, checked against this run's figures. A target is judged on the
//! median over repetitions; the min–max is reported beside it, and a miss is listed
//! as a miss.

use crate::contender::Mode;
use crate::results::Results;
use crate::stats::{spread, Spread};

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub wanted: String,
    pub measured: Spread,
    pub unit: &'static str,
    /// Decimals the measured figures are shown with.
    pub decimals: usize,
    /// `None` when the run did not measure it (`--only`).
    pub met: Option<bool>,
}

#[derive(Clone, Copy)]
enum Want {
    AtLeast(f64),
    AtMost(f64),
    /// Rounds to zero at the unit's precision (|x| < 0.5).
    Zero,
}

impl Want {
    fn describe(self, unit: &str) -> String {
        match self {
            Want::AtLeast(x) => format!("≥ {x}{unit}"),
            Want::AtMost(x) => format!("≤ {x}{unit}"),
            Want::Zero => format!("0{unit}"),
        }
    }

    fn met(self, value: f64) -> bool {
        match self {
            Want::AtLeast(x) => value >= x,
            Want::AtMost(x) => value <= x,
            Want::Zero => value.abs() < 0.5,
        }
    }
}

fn target(name: String, want: Want, unit: &'static str, samples: Option<Vec<f64>>) -> Target {
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
        unit,
        decimals,
    }
}

const POLL_50: Mode = Mode::Poll { retry_ms: 50 };
const POLL_5: Mode = Mode::Poll { retry_ms: 5 };

pub fn evaluate(results: &Results) -> Vec<Target> {
    let ratio = |group: &str, pipelined: bool, baseline: &str| {
        results.ratio(group, pipelined, baseline).map(|r| r.samples)
    };
    let mut targets = vec![
        target(
            "pipelined: LOCK.ACQUIRE ÷ SET NX PX".into(),
            Want::AtLeast(0.9),
            "×",
            ratio("acquire", true, "SET NX PX"),
        ),
        target(
            "pipelined: LOCK.ACQUIRE ÷ (SET NX PX + INCR)".into(),
            Want::AtLeast(1.5),
            "×",
            ratio("acquire", true, "SET NX PX + INCR fence"),
        ),
        target(
            "pipelined: LOCK.RELEASE ÷ Lua release".into(),
            Want::AtLeast(2.5),
            "×",
            ratio("release", true, "Lua release (EVALSHA)"),
        ),
        target(
            "pipelined: LOCK.REFRESH ÷ Lua refresh".into(),
            Want::AtLeast(2.5),
            "×",
            ratio("refresh", true, "Lua refresh (EVALSHA)"),
        ),
        target(
            "pipelined: lock cycle ÷ Lua-pattern cycle".into(),
            Want::AtLeast(2.0),
            "×",
            ratio("cycle", true, "Lua pattern (3 commands)"),
        ),
        target(
            "unpipelined: lock cycle ÷ Lua-pattern cycle".into(),
            Want::AtLeast(1.4),
            "×",
            ratio("cycle", false, "Lua pattern (3 commands)"),
        ),
    ];
    let smallest = results.settings.contention_clients.iter().copied().min();
    let largest = results.settings.contention_clients.iter().copied().max();
    if let Some(clients) = smallest {
        targets.push(target(
            format!("contention, {clients} clients: wait p99 of polling 50 ms ÷ BLOCK"),
            Want::AtLeast(10.0),
            "×",
            results.contention_ratio(clients, POLL_50, Mode::Block, |s| s.p99_ms),
        ));
    }
    if let Some(clients) = largest {
        for poll in [POLL_5, POLL_50] {
            targets.push(target(
                format!(
                    "contention, {clients} clients: grants/s of BLOCK ÷ {}",
                    poll.label()
                ),
                Want::AtLeast(1.0),
                "×",
                results.contention_ratio(clients, Mode::Block, poll, |s| s.grants_per_s),
            ));
        }
    }
    let block_failures: Vec<f64> = (0..results.settings.repetitions)
        .map(|rep| {
            results
                .contention
                .iter()
                .filter(|c| c.mode == Mode::Block)
                .filter_map(|c| c.samples.get(rep))
                .map(|s| s.failed as f64)
                .sum()
        })
        .collect();
    targets.push(target(
        "contention: failed attempts with BLOCK (all client counts)".into(),
        Want::Zero,
        "",
        (!results.contention.is_empty()).then_some(block_failures),
    ));
    for clients in &results.settings.contention_clients {
        targets.push(target(
            format!("contention, {clients} clients: Jain's index with BLOCK"),
            Want::AtLeast(0.99),
            "",
            results
                .contention(*clients, Mode::Block)
                .map(|c| c.samples.iter().map(|s| s.jain).collect()),
        ));
    }
    targets.push(target(
        "memory: bytes per held fencelock lock".into(),
        Want::AtMost(160.0),
        " B",
        Some(results.memory.fencelock_held.clone()),
    ));
    targets.push(target(
        "memory: bytes left per released fencelock lock name".into(),
        Want::Zero,
        " B",
        Some(results.memory.fencelock_left.clone()),
    ));
    targets
}
