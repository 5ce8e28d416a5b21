//! The four-key cycle: `LOCK.ACQUIREALL 4 k1 k2 k3 k4 ttl TOKEN t` against four
//! `LOCK.ACQUIRE ki ttl TOKEN t` in one write, each cycle then releasing its keys with
//! four `LOCK.RELEASE ki t` in one write (`recipes::Command::AcquireAllCycle`,
//! `PipelinedAcquireCycle`). Each connection cycles through sets of keys of its own,
//! so no acquire is ever refused. Both variants run the same number of cycles, back to
//! back in alternating order within each repetition, pipelined (32 steps in flight per
//! connection, a step being the one write of an acquire or a release) and unpipelined
//! (one step at a time), through scenario 1's load driver and its check that nothing
//! else took the server's CPU.

use std::io;

use crate::measure::lua::Scripts;
use crate::measure::recipes::{Command, Recipe};
use crate::measure::server::{self, flush, Server};
use crate::measure::throughput::measure;
use crate::results::acquireall::{ACQUIREALL_CYCLE, PIPELINED_CYCLE};
use crate::results::throughput::{GroupResult, Series};
use crate::results::Workload;

pub const GROUP: &str = "acquireall";
const TITLE: &str = "four-key cycle: acquire 4 keys under one token + release them";
const UNIT: &str = "cycles/s";
const VARIANTS: [(&str, Command); 2] = [
    (ACQUIREALL_CYCLE, Command::AcquireAllCycle),
    (PIPELINED_CYCLE, Command::PipelinedAcquireCycle),
];

pub fn run(server: &Server, workload: &Workload) -> io::Result<Vec<GroupResult>> {
    let mut admin = server::connect(server)?;
    let scripts = Scripts::load(&mut admin)?;
    // The same cycles for both: as many as the workload's commands make of the variant
    // with more commands per cycle.
    let per_cycle = Command::PipelinedAcquireCycle.commands_per_op();
    let modes = [
        (workload.depth, workload.pipelined_commands),
        (1, workload.unpipelined_commands),
    ];
    let mut results: Vec<GroupResult> = modes
        .iter()
        .map(|&(depth, _)| GroupResult {
            id: GROUP.to_string(),
            title: TITLE.to_string(),
            unit: UNIT.to_string(),
            depth,
            series: VARIANTS
                .iter()
                .map(|&(label, command)| Series {
                    label: label.to_string(),
                    commands_per_op: command.commands_per_op(),
                    samples: Vec::new(),
                    busy: 0,
                    server_busy: Vec::new(),
                })
                .collect(),
        })
        .collect();
    for rep in 0..workload.repetitions {
        for (result, &(depth, commands)) in results.iter_mut().zip(&modes) {
            let cycles = (commands / per_cycle).max(1);
            let mut order: Vec<usize> = (0..VARIANTS.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for v in order {
                let (label, command) = VARIANTS[v];
                let recipe = Recipe::new(command, &scripts);
                let (run, busy) = measure(server, workload, &mut admin, &recipe, depth, cycles)
                    .map_err(|e| io::Error::other(format!("{label}: {e}")))?;
                let series = &mut result.series[v];
                series.samples.push(run.per_second());
                series.busy += run.busy;
                series.server_busy.push(busy);
            }
            let [ours, theirs] = [&result.series[0], &result.series[1]].map(|s| s.samples[rep]);
            eprintln!(
                "  [rep {}/{}] depth {:>2}  {ACQUIREALL_CYCLE} {ours:>8.0} {UNIT}  {PIPELINED_CYCLE} {theirs:>8.0} {UNIT}  ratio {:.3}×",
                rep + 1,
                workload.repetitions,
                depth,
                ours / theirs
            );
        }
    }
    flush(&mut admin)?;
    Ok(results)
}
