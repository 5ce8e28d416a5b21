//! Scenario 5: where the time goes. Each module command and its native counterparts
//! run alone under the throughput scenario's load (50 connections, 32 deep, hit path,
//! set-up untimed), and the server's side of it is counted per command:
//! - on the benchmark's own server: event-loop CPU time (`/proc/<pid>/schedstat`),
//!   request and reply bytes (`INFO stats` `total_net_{input,output}_bytes`);
//! - on a second server run under callgrind (where valgrind is installed; not in a
//!   smoke run): instructions executed and calls into the allocator.
//!
//! `PING` is the cost every command pays (read, parse, dispatch, reply, write); the
//! floor module's `FLOOR.*` rows, next to fencelock's, the cost of the key work a
//! lock command does through the module API and nothing else.

use std::io;
use std::time::Duration;

use testkit::resp::Conn;

use crate::measure::callgrind::{Callgrind, Counts};
use crate::measure::load;
use crate::measure::lua::Scripts;
use crate::measure::recipes::{Command, Recipe};
use crate::measure::server::{self, flush, info_field, Server};
use crate::measure::throughput::prepare;
use crate::results::machine::Natives;
use crate::results::profile::{PerCommand, ProfileResult, Row};
use crate::results::throughput::{
    DELEX_IFEQ, DELIFEQ, FLOOR_ACQUIRE, FLOOR_REFRESH, FLOOR_RELEASE, SET_IFEQ,
};
use crate::results::Workload;

/// What is profiled, module commands next to what they replace.
const KINDS: &[(&str, Command)] = &[
    ("PING", Command::Ping),
    ("LOCK.ACQUIRE", Command::LockAcquire),
    (FLOOR_ACQUIRE, Command::FloorAcquire),
    ("SET NX PX", Command::SetNxPx),
    ("INCR fence", Command::Incr),
    ("LOCK.RELEASE", Command::LockRelease),
    (FLOOR_RELEASE, Command::FloorRelease),
    ("Lua release (EVALSHA)", Command::LuaRelease),
    (DELIFEQ, Command::DelIfEq),
    (DELEX_IFEQ, Command::DelexIfEq),
    ("LOCK.REFRESH", Command::LockRefresh),
    (FLOOR_REFRESH, Command::FloorRefresh),
    ("Lua refresh (EVALSHA)", Command::LuaRefresh),
    (SET_IFEQ, Command::SetIfEq),
    ("LOCK.FENCE", Command::LockFence),
    ("GET", Command::Get),
    // Cycles: one acquire and its release (two commands) a row.
    (
        "semaphore cycle (LOCK.ACQUIRE LIMIT + LOCK.RELEASE)",
        Command::SemaphoreCycle,
    ),
    (
        "ZSET semaphore cycle (EVALSHA + ZREM)",
        Command::LuaSemaphoreCycle,
    ),
];

/// Commands per connection under callgrind, which runs the server ~50× slower:
/// 10,000 commands a kind are plenty for counts that do not vary with timing.
const CALLGRIND_COMMANDS: u64 = 200;

/// Lets the server close the set-up's connections before counting starts.
const SETTLE: Duration = Duration::from_millis(50);

fn net_bytes(conn: &mut Conn) -> io::Result<(f64, f64)> {
    let field = |conn: &mut Conn, name: &str| -> io::Result<f64> {
        info_field(conn, "stats", name)?
            .parse()
            .map_err(|e| io::Error::other(format!("{name}: {e}")))
    };
    Ok((
        field(conn, "total_net_input_bytes")?,
        field(conn, "total_net_output_bytes")?,
    ))
}

pub fn run(server: &Server, workload: &Workload, natives: Natives) -> io::Result<ProfileResult> {
    let mut admin = server::connect(server)?;
    let scripts = Scripts::load(&mut admin)?;
    let kinds: Vec<(&'static str, Command)> = KINDS
        .iter()
        .copied()
        .filter(|&(_, command)| natives.has(command))
        .collect();
    let recipe = |command| Recipe::new(command, &scripts);
    let ops = workload.profile_commands;
    let commands = (ops * workload.connections as u64) as f64;
    // CPU time of one run: its connections' accept and close are not the command's,
    // so a run of no commands is taken off each.
    let cpu_of_run = |recipe: &Recipe, ops: u64| -> io::Result<f64> {
        std::thread::sleep(SETTLE);
        let before = server::cpu_seconds(server);
        load::run(
            server.port,
            workload.connections,
            workload.depth,
            ops,
            recipe,
        )?;
        Ok(server::cpu_seconds(server)
            .zip(before)
            .map_or(f64::NAN, |(after, before)| after - before))
    };
    let connections_cpu = cpu_of_run(&recipe(Command::Ping), 0)?;
    let mut rows = Vec::new();
    for &(label, command) in &kinds {
        let recipe = recipe(command);
        flush(&mut admin)?;
        let recipe = prepare(server.port, workload, &recipe, ops)?;
        let (in_before, out_before) = net_bytes(&mut admin)?;
        let cpu = cpu_of_run(&recipe, ops)? - connections_cpu;
        let (in_after, out_after) = net_bytes(&mut admin)?;
        rows.push(Row {
            label: label.to_string(),
            cpu_us: cpu * 1e6 / commands,
            bytes_in: (in_after - in_before) / commands,
            bytes_out: (out_after - out_before) / commands,
            counts: None,
        });
    }
    flush(&mut admin)?;

    if workload.smoke {
        return Ok(ProfileResult {
            rows,
            without_callgrind: Some("not in a smoke run".into()),
        });
    }
    let Some(profiled) = Callgrind::start(&testkit::server_binary(), &server::modules()?)? else {
        return Ok(ProfileResult {
            rows,
            without_callgrind: Some("valgrind is not installed".into()),
        });
    };
    eprintln!("  instructions and allocations under callgrind");
    let mut conn = Conn::connect(profiled.port)?;
    Scripts::load(&mut conn)?;
    // As above, the counts of a run of no commands are taken off each.
    let counts_of_run = |recipe: &Recipe, ops: u64| -> io::Result<Counts> {
        std::thread::sleep(SETTLE);
        profiled.zero()?;
        load::run(
            profiled.port,
            workload.connections,
            workload.depth,
            ops,
            recipe,
        )?;
        profiled.dump()
    };
    let connections = counts_of_run(&recipe(Command::Ping), 0)?;
    let n = (CALLGRIND_COMMANDS * workload.connections as u64) as f64;
    for (row, &(label, command)) in rows.iter_mut().zip(&kinds) {
        let recipe = recipe(command);
        flush(&mut conn)?;
        let recipe = prepare(profiled.port, workload, &recipe, CALLGRIND_COMMANDS)?;
        let counts = counts_of_run(&recipe, CALLGRIND_COMMANDS)?;
        let per = PerCommand {
            instructions: counts.instructions.saturating_sub(connections.instructions) as f64 / n,
            allocations: counts.allocations.saturating_sub(connections.allocations) as f64 / n,
        };
        row.counts = Some(per);
        eprintln!(
            "  {label:<24} {:>8.0} instructions, {:>5.2} allocations per command",
            per.instructions, per.allocations
        );
    }
    Ok(ProfileResult {
        rows,
        without_callgrind: None,
    })
}
