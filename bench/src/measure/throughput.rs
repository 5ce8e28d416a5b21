//! Scenarios 1 and 2: per-command throughput, the lock cycle and the semaphore cycle,
//! fencelock against the Lua pattern (the ZSET recipe for the semaphore; for run once,
//! a `GET` of a cached result and the `SET NX` + `SET` + `GET` idempotency recipe), where the
//! server has them its native owner checks, and for acquire, release and refresh the
//! floor module (`bench/floor`: the same key work and nothing else), pipelined and
//! unpipelined. Every comparison runs its variants back to back within each
//! repetition, in alternating order (ABC, CBA, …), on a flushed server, with any
//! set-up (keys held by the right token) untimed.

use std::io;

use testkit::resp::Conn;

use crate::measure::load;
use crate::measure::lua::Scripts;
use crate::measure::operation::{HeldTokens, Keys};
use crate::measure::recipes::{Command, Recipe, Setup, HELD_PER_CONN};
use crate::measure::server::{self, flush, Server};
use crate::results::machine::Natives;
use crate::results::throughput::{
    GroupResult, Series, DELEX_IFEQ, DELIFEQ, FLOOR_ACQUIRE, FLOOR_REFRESH, FLOOR_RELEASE,
    NATIVE_CYCLE, SET_IFEQ, ZSET_SEMAPHORE,
};
use crate::results::Workload;

/// One comparison: the fencelock variant first, then the baselines (those the server
/// cannot run are left out). The floor comes right after fencelock's variant: the two
/// compared most closely also run next to each other. (Also scenario 9's comparisons.)
pub struct Group {
    pub id: &'static str,
    pub title: &'static str,
    pub unit: &'static str,
    pub variants: &'static [(&'static str, Command)],
}

const GROUPS: [Group; 10] = [
    Group {
        id: "acquire",
        title: "acquire on fresh keys",
        unit: "grants/s",
        variants: &[
            ("LOCK.ACQUIRE", Command::LockAcquire),
            (FLOOR_ACQUIRE, Command::FloorAcquire),
            ("SET NX PX", Command::SetNxPx),
            ("SET NX PX + INCR fence", Command::SetNxPxIncr),
        ],
    },
    Group {
        id: "release",
        title: "release, hit path",
        unit: "releases/s",
        variants: &[
            ("LOCK.RELEASE", Command::LockRelease),
            (FLOOR_RELEASE, Command::FloorRelease),
            ("Lua release (EVALSHA)", Command::LuaRelease),
            (DELIFEQ, Command::DelIfEq),
            (DELEX_IFEQ, Command::DelexIfEq),
        ],
    },
    Group {
        id: "refresh",
        title: "refresh, hit path",
        unit: "refreshes/s",
        variants: &[
            ("LOCK.REFRESH", Command::LockRefresh),
            (FLOOR_REFRESH, Command::FloorRefresh),
            ("Lua refresh (EVALSHA)", Command::LuaRefresh),
            (SET_IFEQ, Command::SetIfEq),
        ],
    },
    Group {
        id: "fence",
        title: "read the fence",
        unit: "reads/s",
        variants: &[("LOCK.FENCE", Command::LockFence), ("GET", Command::Get)],
    },
    Group {
        id: "replay",
        title: "a duplicate's replay of a stored result",
        unit: "replies/s",
        variants: &[
            ("LOCK.ONCE (done)", Command::OnceReplay),
            ("GET cached result", Command::GetResult),
        ],
    },
    Group {
        id: "once-cycle",
        title: "run once: claim + store the result + a duplicate's read, random keys",
        unit: "cycles/s",
        variants: &[
            ("LOCK.ONCE + LOCK.DONE + LOCK.ONCE", Command::OnceCycle),
            (
                "SET NX + SET + GET (Powertools-style)",
                Command::SetNxSetGetCycle,
            ),
        ],
    },
    Group {
        id: "guard",
        title: "guarded write (SET), hit path",
        unit: "writes/s",
        variants: &[
            ("LOCK.GUARD … SET", Command::LockGuard),
            ("Lua guard (EVALSHA)", Command::LuaGuard),
        ],
    },
    Group {
        id: "fenced",
        title: "fenced write (SET), fence admitted",
        unit: "writes/s",
        variants: &[
            ("LOCK.FENCED … SET", Command::LockFenced),
            ("Lua mark check (EVALSHA)", Command::LuaFenced),
        ],
    },
    Group {
        id: "cycle",
        title: "lock cycle: acquire with fence + release, random keys",
        unit: "cycles/s",
        variants: &[
            ("fencelock (2 commands)", Command::FencelockCycle),
            ("Lua pattern (3 commands)", Command::LuaCycle),
            (NATIVE_CYCLE, Command::NativeCycle),
        ],
    },
    // The title spells out recipes::SEMAPHORES and SEMAPHORE_LIMIT.
    Group {
        id: "semaphore",
        title: "semaphore cycle: acquire + release, 100 semaphores of 64 permits",
        unit: "cycles/s",
        variants: &[
            (
                "LOCK.ACQUIRE … LIMIT + LOCK.RELEASE",
                Command::SemaphoreCycle,
            ),
            (ZSET_SEMAPHORE, Command::LuaSemaphoreCycle),
        ],
    },
];

/// Runs every comparison in both modes, `workload.repetitions` times.
pub fn run(server: &Server, workload: &Workload, natives: Natives) -> io::Result<Vec<GroupResult>> {
    compare(server, workload, natives, &GROUPS)
}

/// Runs `groups` in both modes, `workload.repetitions` times, each group's variants
/// back to back in alternating order (those the server lacks left out).
pub fn compare(
    server: &Server,
    workload: &Workload,
    natives: Natives,
    groups: &[Group],
) -> io::Result<Vec<GroupResult>> {
    let mut admin = server::connect(server)?;
    let scripts = Scripts::load(&mut admin)?;
    let modes = [
        (workload.depth, workload.pipelined_commands),
        (1, workload.unpipelined_commands),
    ];
    let variants = |group: &Group| -> Vec<(&'static str, Command)> {
        group
            .variants
            .iter()
            .copied()
            .filter(|&(_, command)| natives.has(command))
            .collect()
    };
    let mut results: Vec<GroupResult> = Vec::new();
    for group in groups {
        for &(depth, _) in &modes {
            results.push(GroupResult {
                id: group.id.to_string(),
                title: group.title.to_string(),
                unit: group.unit.to_string(),
                depth,
                series: variants(group)
                    .into_iter()
                    .map(|(label, command)| Series {
                        label: label.to_string(),
                        commands_per_op: command.commands_per_op(),
                        samples: Vec::new(),
                        busy: 0,
                        server_busy: Vec::new(),
                    })
                    .collect(),
            });
        }
    }
    for rep in 0..workload.repetitions {
        for (g, group) in groups.iter().enumerate() {
            let variants = variants(group);
            for (m, &(depth, commands)) in modes.iter().enumerate() {
                let result = &mut results[g * modes.len() + m];
                let mut order: Vec<usize> = (0..variants.len()).collect();
                if rep % 2 == 1 {
                    order.reverse();
                }
                for v in order {
                    let (label, command) = variants[v];
                    let recipe = Recipe::new(command, &scripts);
                    let ops = (commands / command.commands_per_op()).max(1);
                    let (measured, busy) = measure(
                        server, workload, &mut admin, &recipe, depth, ops,
                    )
                    .map_err(|e| io::Error::other(format!("{label} ({}): {e}", group.id)))?;
                    let rate = measured.per_second();
                    eprintln!(
                        "  [rep {}/{}] {:<8} depth {:>2}  {:<26} {:>10.0} {:<12} server busy {:>3.0}%",
                        rep + 1,
                        workload.repetitions,
                        group.id,
                        depth,
                        label,
                        rate,
                        group.unit,
                        busy * 100.0
                    );
                    let series = &mut result.series[v];
                    series.samples.push(rate);
                    series.busy += measured.busy;
                    series.server_busy.push(busy);
                }
            }
        }
    }
    flush(&mut admin)?;
    Ok(results)
}

/// A run whose server was on a CPU less than this share of the time was slowed by
/// something else (another process on the machine): it is run again. Not in a smoke
/// run, whose runs are too short for the share to mean much.
const DISTURBED_BELOW: f64 = 0.85;
const ATTEMPTS: usize = 3;

/// One timed run on a flushed server, repeated (up to `ATTEMPTS`) while another
/// process visibly took the server's CPU; keeps the least disturbed attempt. Returns
/// the run and the server's busy share during it. (Also the four-key cycles' runs.)
pub fn measure(
    server: &Server,
    workload: &Workload,
    admin: &mut Conn,
    recipe: &Recipe,
    depth: usize,
    ops: u64,
) -> io::Result<(load::Run, f64)> {
    let mut best: Option<(load::Run, f64)> = None;
    let attempts = if workload.smoke { 1 } else { ATTEMPTS };
    for attempt in 0..attempts {
        flush(admin)?;
        let recipe = prepare(server.port, workload, recipe, ops)?;
        let cpu_before = server::cpu_seconds(server);
        let run = load::run(server.port, workload.connections, depth, ops, &recipe)?;
        let busy = server::cpu_seconds(server)
            .zip(cpu_before)
            .map_or(f64::NAN, |(after, before)| (after - before) / run.seconds);
        if best.as_ref().is_none_or(|(_, b)| busy > *b || b.is_nan()) {
            best = Some((run, busy));
        }
        if busy.is_nan() || busy >= DISTURBED_BELOW || attempt + 1 == attempts {
            break;
        }
        eprintln!(
            "    server busy only {:.0}% (attempt {}): another process took the CPU, running again",
            busy * 100.0,
            attempt + 1
        );
    }
    best.ok_or_else(|| io::Error::other("no attempt ran"))
}

/// Puts the keys a variant's hit path needs in place, untimed. Set-up commands visit
/// fresh keys, which are the timed run's keys: both number them from 0 per connection.
/// Returns the recipe to time: `recipe`, with the tokens the set-up was granted where
/// the server chose them (the floor's).
pub fn prepare(port: u16, workload: &Workload, recipe: &Recipe, ops: u64) -> io::Result<Recipe> {
    let (command, count) = match recipe.command.setup() {
        None => return Ok(recipe.clone()),
        Some(Setup::SameKeys(command)) => (command, ops),
        Some(Setup::Held(command)) => (command, HELD_PER_CONN),
    };
    debug_assert!(matches!(command.keys(), Keys::Fresh));
    let mut setup = Recipe::new(command, &recipe.scripts);
    if command.records_tokens() {
        setup.held = HeldTokens::new(workload.connections);
    }
    load::run(
        port,
        workload.connections,
        workload.depth.max(32),
        count,
        &setup,
    )?;
    Ok(Recipe {
        held: setup.held,
        ..recipe.clone()
    })
}
