//! Scenarios 1 and 2: per-command throughput and the lock cycle, fencelock against
//! the Lua pattern, pipelined and unpipelined. Every comparison runs its variants
//! back to back within each repetition, in alternating order (ABC, CBA, …), on a
//! flushed server, with any set-up (keys held by the right token) untimed.

use std::io;

use crate::cycle::{FencelockCycle, LuaCycle};
use crate::load::{self, Keys, Recipe};
use crate::lua::Scripts;
use crate::recipes::{Command, CommandRecipe, HELD_PER_CONN};
use crate::server::{flush, Server};
use crate::settings::Settings;

/// Untimed keys a variant needs before its run.
enum Setup {
    /// Hold exactly the keys the timed run will visit (each released once).
    SameKeys(Command),
    /// Hold `HELD_PER_CONN` keys per connection (visited in turn).
    Held(Command),
}

struct Variant {
    label: &'static str,
    recipe: Box<dyn Recipe>,
    commands_per_op: u64,
    setup: Option<Setup>,
}

/// One comparison: the fencelock variant first, then the baselines.
struct Group {
    id: &'static str,
    title: &'static str,
    unit: &'static str,
    variants: Vec<Variant>,
}

/// Measured rates of one comparison in one pipelining mode: one series per variant,
/// one sample per repetition.
#[derive(Debug, Clone)]
pub struct GroupResult {
    pub id: &'static str,
    pub title: &'static str,
    pub unit: &'static str,
    pub depth: usize,
    pub series: Vec<Series>,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub label: &'static str,
    pub commands_per_op: u64,
    /// Operations per second, one per repetition.
    pub samples: Vec<f64>,
    /// Operations retried because a random key was taken, summed over repetitions.
    pub busy: u64,
    /// Share of the run's wall time the server's event loop spent on a CPU, one per
    /// repetition: well below 1 in a pipelined run means the load generator, not the
    /// server, set the pace.
    pub server_busy: Vec<f64>,
}

fn command(
    label: &'static str,
    command: Command,
    keys: Keys,
    scripts: &Scripts,
    setup: Option<Setup>,
) -> Variant {
    Variant {
        label,
        recipe: Box::new(CommandRecipe::new(command, keys, scripts)),
        commands_per_op: if command == Command::SetNxPxIncr {
            2
        } else {
            1
        },
        setup,
    }
}

fn groups(scripts: &Scripts) -> Vec<Group> {
    let held = Keys::Cycle(HELD_PER_CONN);
    vec![
        Group {
            id: "acquire",
            title: "acquire on fresh keys",
            unit: "grants/s",
            variants: vec![
                command(
                    "LOCK.ACQUIRE",
                    Command::LockAcquire,
                    Keys::Fresh,
                    scripts,
                    None,
                ),
                command("SET NX PX", Command::SetNxPx, Keys::Fresh, scripts, None),
                command(
                    "SET NX PX + INCR fence",
                    Command::SetNxPxIncr,
                    Keys::Fresh,
                    scripts,
                    None,
                ),
            ],
        },
        Group {
            id: "release",
            title: "release, hit path",
            unit: "releases/s",
            variants: vec![
                command(
                    "LOCK.RELEASE",
                    Command::LockRelease,
                    Keys::Fresh,
                    scripts,
                    Some(Setup::SameKeys(Command::HoldWithFencelock)),
                ),
                command(
                    "Lua release (EVALSHA)",
                    Command::LuaRelease,
                    Keys::Fresh,
                    scripts,
                    Some(Setup::SameKeys(Command::HoldWithSet)),
                ),
            ],
        },
        Group {
            id: "refresh",
            title: "refresh, hit path",
            unit: "refreshes/s",
            variants: vec![
                command(
                    "LOCK.REFRESH",
                    Command::LockRefresh,
                    held,
                    scripts,
                    Some(Setup::Held(Command::HoldWithFencelock)),
                ),
                command(
                    "Lua refresh (EVALSHA)",
                    Command::LuaRefresh,
                    held,
                    scripts,
                    Some(Setup::Held(Command::HoldWithSet)),
                ),
            ],
        },
        Group {
            id: "fence",
            title: "read the fence",
            unit: "reads/s",
            variants: vec![
                command(
                    "LOCK.FENCE",
                    Command::LockFence,
                    held,
                    scripts,
                    Some(Setup::Held(Command::HoldWithFencelock)),
                ),
                command(
                    "GET",
                    Command::Get,
                    held,
                    scripts,
                    Some(Setup::Held(Command::HoldWithSet)),
                ),
            ],
        },
        Group {
            id: "cycle",
            title: "lock cycle: acquire with fence + release, random keys",
            unit: "cycles/s",
            variants: vec![
                Variant {
                    label: "fencelock (2 commands)",
                    recipe: Box::new(FencelockCycle),
                    commands_per_op: 2,
                    setup: None,
                },
                Variant {
                    label: "Lua pattern (3 commands)",
                    recipe: Box::new(LuaCycle {
                        scripts: scripts.clone(),
                    }),
                    commands_per_op: 3,
                    setup: None,
                },
            ],
        },
    ]
}

/// Runs every comparison in both modes, `settings.repetitions` times.
pub fn run(server: &Server, settings: &Settings) -> io::Result<Vec<GroupResult>> {
    let mut admin = server.connect()?;
    let scripts = Scripts::load(&mut admin)?;
    let groups = groups(&scripts);
    let modes = [
        (settings.depth, settings.pipelined_commands),
        (1, settings.unpipelined_commands),
    ];
    let mut results: Vec<GroupResult> = Vec::new();
    for group in &groups {
        for &(depth, _) in &modes {
            results.push(GroupResult {
                id: group.id,
                title: group.title,
                unit: group.unit,
                depth,
                series: group
                    .variants
                    .iter()
                    .map(|v| Series {
                        label: v.label,
                        commands_per_op: v.commands_per_op,
                        samples: Vec::new(),
                        busy: 0,
                        server_busy: Vec::new(),
                    })
                    .collect(),
            });
        }
    }
    for rep in 0..settings.repetitions {
        for (g, group) in groups.iter().enumerate() {
            for (m, &(depth, commands)) in modes.iter().enumerate() {
                let result = &mut results[g * modes.len() + m];
                let mut order: Vec<usize> = (0..group.variants.len()).collect();
                if rep % 2 == 1 {
                    order.reverse();
                }
                for v in order {
                    let variant = &group.variants[v];
                    let ops = (commands / variant.commands_per_op).max(1);
                    let (measured, busy) =
                        measure(server, settings, &mut admin, variant, depth, ops, &scripts)
                            .map_err(|e| {
                                io::Error::other(format!("{} ({}): {e}", variant.label, group.id))
                            })?;
                    let rate = measured.per_second();
                    eprintln!(
                        "  [rep {}/{}] {:<8} depth {:>2}  {:<26} {:>10.0} {:<12} server busy {:>3.0}%",
                        rep + 1,
                        settings.repetitions,
                        group.id,
                        depth,
                        variant.label,
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
/// the run and the server's busy share during it.
fn measure(
    server: &Server,
    settings: &Settings,
    admin: &mut crate::resp::Conn,
    variant: &Variant,
    depth: usize,
    ops: u64,
    scripts: &Scripts,
) -> io::Result<(load::Run, f64)> {
    let mut best: Option<(load::Run, f64)> = None;
    let attempts = if settings.smoke { 1 } else { ATTEMPTS };
    for attempt in 0..attempts {
        flush(admin)?;
        prepare(server, settings, variant, ops, scripts)?;
        let cpu_before = server.cpu_seconds();
        let run = load::run(
            server.port,
            settings.connections,
            depth,
            ops,
            variant.recipe.as_ref(),
        )?;
        let busy = server
            .cpu_seconds()
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

/// Puts the keys a variant's hit path needs in place, untimed.
fn prepare(
    server: &Server,
    settings: &Settings,
    variant: &Variant,
    ops: u64,
    scripts: &Scripts,
) -> io::Result<()> {
    let (command, count) = match variant.setup {
        None => return Ok(()),
        Some(Setup::SameKeys(command)) => (command, ops),
        Some(Setup::Held(command)) => (command, HELD_PER_CONN),
    };
    let recipe = CommandRecipe::new(command, Keys::Fresh, scripts);
    load::run(
        server.port,
        settings.connections,
        settings.depth.max(32),
        count,
        &recipe,
    )
    .map(drop)
}
