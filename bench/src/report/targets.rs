//! The issues' targets, checked against this run's figures. A target is judged on the
//! median over repetitions; the min–max is reported beside it, and a miss is listed
//! as a miss. The floor targets come first: fencelock ÷ the floor module (`bench/floor`,
//! the same key work through the module API and nothing else) ≥ 0.95× — what is above
//! the floor is fencelock's to remove, what is below it the server's. A target against a native command the server lacks (`DELIFEQ`,
//! `SET … IFEQ`) is listed as not applicable, not dropped, so that the tables of
//! several servers line up.

use crate::report::common::{target, Want};
use crate::report::{acquireall, curves, peers, sessions};
use crate::results::contention::{Lock, Mode};
use crate::results::throughput::{
    DELEX_IFEQ, DELIFEQ, FLOOR_ACQUIRE, FLOOR_REFRESH, FLOOR_RELEASE, NATIVE_CYCLE, SET_IFEQ,
    ZSET_SEMAPHORE,
};
use crate::results::{Results, Target};

const POLL_50: Mode = Mode::Poll { retry_ms: 50 };
const POLL_5: Mode = Mode::Poll { retry_ms: 5 };

/// Each floor comparison: the group, fencelock's command, the floor's.
pub const FLOOR_ROWS: [(&str, &str, &str); 3] = [
    ("acquire", "LOCK.ACQUIRE", FLOOR_ACQUIRE),
    ("release", "LOCK.RELEASE", FLOOR_RELEASE),
    ("refresh", "LOCK.REFRESH", FLOOR_REFRESH),
];

/// What fencelock ÷ the floor module must reach, in every mode.
pub const FLOOR_TARGET: f64 = 0.95;

/// Per-repetition `numerator / denominator` of two memory series.
fn memory_ratio(numerator: &[f64], denominator: &[f64]) -> Option<Vec<f64>> {
    (!numerator.is_empty()).then(|| {
        numerator
            .iter()
            .zip(denominator)
            .map(|(n, d)| n / d)
            .collect()
    })
}

pub fn evaluate(results: &Results) -> Vec<Target> {
    let ratio = |group: &str, pipelined: bool, baseline: &str| {
        results.ratio(group, pipelined, baseline).map(|r| r.samples)
    };
    let mut targets = Vec::new();
    for (mode, pipelined) in [("pipelined", true), ("unpipelined", false)] {
        for (group, ours, floor) in FLOOR_ROWS {
            targets.push(target(
                format!("{mode}: {ours} ÷ {floor}"),
                Want::AtLeast(FLOOR_TARGET),
                "×",
                ratio(group, pipelined, floor),
            ));
        }
    }
    for (mode, pipelined) in [("pipelined", true), ("unpipelined", false)] {
        targets.push(target(
            format!("{mode}: LOCK.ACQUIRE ÷ SET NX PX"),
            Want::AtLeast(0.9),
            "×",
            ratio("acquire", pipelined, "SET NX PX"),
        ));
    }
    targets.extend([
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
            "pipelined: LOCK.GUARD … SET ÷ Lua guard".into(),
            Want::AtLeast(1.5),
            "×",
            ratio("guard", true, "Lua guard (EVALSHA)"),
        ),
        target(
            "pipelined: LOCK.FENCED … SET ÷ Lua mark check".into(),
            Want::AtLeast(1.5),
            "×",
            ratio("fenced", true, "Lua mark check (EVALSHA)"),
        ),
    ]);
    for (mode, pipelined) in [("pipelined", true), ("unpipelined", false)] {
        targets.push(target(
            format!("{mode}: LOCK.RELEASE ÷ DELIFEQ"),
            Want::AtLeast(0.95),
            "×",
            ratio("release", pipelined, DELIFEQ),
        ));
        targets.push(target(
            format!("{mode}: LOCK.RELEASE ÷ DELEX IFEQ"),
            Want::AtLeast(0.95),
            "×",
            ratio("release", pipelined, DELEX_IFEQ),
        ));
        targets.push(target(
            format!("{mode}: LOCK.REFRESH ÷ SET IFEQ PX"),
            Want::AtLeast(0.95),
            "×",
            ratio("refresh", pipelined, SET_IFEQ),
        ));
    }
    targets.extend([
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
        target(
            "pipelined: lock cycle ÷ native cycle (SET NX PX + INCR + DELIFEQ)".into(),
            Want::AtLeast(1.3),
            "×",
            ratio("cycle", true, NATIVE_CYCLE),
        ),
        target(
            "pipelined: semaphore cycle ÷ ZSET-semaphore cycle".into(),
            Want::AtLeast(2.0),
            "×",
            ratio("semaphore", true, ZSET_SEMAPHORE),
        ),
    ]);
    targets.extend(contention_targets(
        results,
        Lock::Mutex,
        &results.workload.contention_clients,
    ));
    targets.extend(contention_targets(
        results,
        Lock::Semaphore {
            limit: results.workload.semaphore_limit,
        },
        &results.workload.semaphore_clients,
    ));
    targets.push(target(
        "memory: bytes per held fencelock lock".into(),
        Want::AtMost(160.0),
        " B",
        (!results.memory.fencelock_held.is_empty()).then(|| results.memory.fencelock_held.clone()),
    ));
    let m = &results.memory;
    targets.push(target(
        "memory: held fencelock lock ÷ held floor lock".into(),
        Want::AtMost(1.05),
        "×",
        memory_ratio(&m.fencelock_held, &m.floor_held),
    ));
    targets.push(target(
        "memory: held fencelock lock ÷ SET NX PX lock (22-char token)".into(),
        Want::AtMost(1.1),
        "×",
        memory_ratio(&m.fencelock_held, &m.set_held),
    ));
    targets.push(target(
        "memory: held fencelock lock ÷ (SET NX PX lock + its fence: key)".into(),
        Want::AtMost(0.8),
        "×",
        memory_ratio(&m.fencelock_held, &m.set_with_fence_held),
    ));
    targets.push(target(
        "memory: bytes left per released fencelock lock name".into(),
        Want::Zero,
        " B",
        (!results.memory.fencelock_left.is_empty()).then(|| results.memory.fencelock_left.clone()),
    ));
    targets.extend(sessions::targets(results.sessions.as_ref()));
    targets.extend(acquireall::targets(results.acquireall.as_ref()));
    targets.extend(peers::targets(results));
    targets.extend(curves::targets(results.curves.as_ref()));
    targets
}

/// The contention targets of one kind of lock, the same for each: the wait p99 of
/// polling 50 ms ÷ BLOCK with the fewest clients, grants/s of BLOCK ÷ polling with the
/// most, no failed attempt with BLOCK, and Jain's index with BLOCK for each count.
fn contention_targets(results: &Results, lock: Lock, clients: &[usize]) -> Vec<Target> {
    let scope = match lock {
        Lock::Mutex => "contention".to_string(),
        Lock::Semaphore { .. } => format!("contention on a {}", lock.label()),
    };
    let mut targets = Vec::new();
    if let Some(&fewest) = clients.iter().min() {
        targets.push(target(
            format!("{scope}, {fewest} clients: wait p99 of polling 50 ms ÷ BLOCK"),
            Want::AtLeast(10.0),
            "×",
            results.contention_ratio(lock, fewest, POLL_50, Mode::Block, |s| s.p99_ms),
        ));
    }
    if let Some(&most) = clients.iter().max() {
        for poll in [POLL_5, POLL_50] {
            targets.push(target(
                format!(
                    "{scope}, {most} clients: grants/s of BLOCK ÷ {}",
                    poll.label()
                ),
                Want::AtLeast(1.0),
                "×",
                results.contention_ratio(lock, most, Mode::Block, poll, |s| s.grants_per_s),
            ));
        }
    }
    let blocking = || {
        results
            .contention
            .iter()
            .filter(move |c| c.lock == lock && c.mode == Mode::Block)
    };
    let block_failures: Vec<f64> = (0..results.workload.repetitions)
        .map(|rep| {
            blocking()
                .filter_map(|c| c.samples.get(rep))
                .map(|s| s.failed as f64)
                .sum()
        })
        .collect();
    targets.push(target(
        format!("{scope}: failed attempts with BLOCK (all client counts)"),
        Want::Zero,
        "",
        blocking().next().is_some().then_some(block_failures),
    ));
    for &count in clients {
        targets.push(target(
            format!("{scope}, {count} clients: Jain's index with BLOCK"),
            Want::AtLeast(0.99),
            "",
            results
                .contention(lock, count, Mode::Block)
                .map(|c| c.samples.iter().map(|s| s.jain).collect()),
        ));
    }
    targets
}
