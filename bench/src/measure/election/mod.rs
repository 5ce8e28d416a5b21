//! Scenario 9: leader election with a public value (`LOCK.OBSERVE`, `LOCK.PROCLAIM`,
//! `LOCK.ACQUIRE … VALUE`, issue 24), in three parts.
//!
//! - `throughput` (on the benchmark's server): `LOCK.PROCLAIM key token v` against the
//!   hand-rolled change of a leader key's value, `EVALSHA` of `if GET == old then SET
//!   key new XX KEEPTTL` (`lua::PROCLAIM`), on held keys; `LOCK.ACQUIRE key ttl VALUE v`
//!   against `LOCK.ACQUIRE key ttl` and `SET key value NX PX ttl` on fresh keys;
//!   pipelined and unpipelined, through scenario 1's comparisons (`throughput::compare`).
//! - `notify` (on a server of its own, many clients): how long `n` observers take to
//!   hear of a grant or a proclaim, `LOCK.OBSERVE … BLOCK` against `PUBLISH` and
//!   `SUBSCRIBE` + `GET`.
//! - `memory` (on the same server): bytes per blocked observer, per subscribed client
//!   and per idle connection, at 1,000 and 10,000.

mod audience;
mod memory;
mod notify;

use std::io;

use crate::measure::curves::{feasible_waiters, raise_open_files, start_server, FD_MARGIN};
use crate::measure::recipes::Command;
use crate::measure::server::Server;
use crate::measure::throughput::{self, Group};
use crate::results::election::{
    ElectionResult, ACQUIRE, ACQUIRE_VALUE, LUA_PROCLAIM, PROCLAIM, SET_NX_PX,
};
use crate::results::machine::Natives;
use crate::results::throughput::GroupResult;
use crate::results::Workload;

const GROUPS: [Group; 2] = [
    Group {
        id: "proclaim",
        title: "change the leader's value, hit path",
        unit: "changes/s",
        variants: &[
            (PROCLAIM, Command::LockProclaim),
            (LUA_PROCLAIM, Command::LuaProclaim),
        ],
    },
    Group {
        id: "acquire-value",
        title: "acquire on fresh keys, with a value",
        unit: "grants/s",
        variants: &[
            (ACQUIRE_VALUE, Command::LockAcquireValue),
            (ACQUIRE, Command::LockAcquire),
            (SET_NX_PX, Command::SetNxPx),
        ],
    },
];

/// The part on the benchmark's own server.
pub fn run(server: &Server, workload: &Workload, natives: Natives) -> io::Result<Vec<GroupResult>> {
    eprintln!("  LOCK.PROCLAIM against the owner-checked SET XX KEEPTTL; LOCK.ACQUIRE … VALUE");
    throughput::compare(server, workload, natives, &GROUPS)
}

/// The sizes of a run, full or smoke.
struct Plan {
    observers: Vec<u64>,
    rounds: u64,
    memory: Vec<u64>,
    settle_s: u64,
}

impl Plan {
    fn new(smoke: bool) -> Self {
        if smoke {
            Self {
                observers: vec![1, 100],
                rounds: 10,
                memory: vec![1_000],
                settle_s: 0,
            }
        } else {
            Self {
                observers: vec![1, 100, 1_000],
                rounds: 100,
                memory: vec![1_000, 10_000],
                // Redis shrinks an idle client's buffers 2 s on, within a second
                // (clientsCron), as the cost curves wait.
                settle_s: 4,
            }
        }
    }
}

/// The parts with many clients, on a server of their own; `throughput` is the part
/// `run` measured.
pub fn observers(
    pinned: bool,
    workload: &Workload,
    throughput: Vec<GroupResult>,
) -> io::Result<ElectionResult> {
    let mut plan = Plan::new(workload.smoke);
    // A pub/sub observer has two connections: its subscription and its GET.
    let largest_notify = plan.observers.iter().max().copied().unwrap_or(0) * 2;
    let largest_memory = plan.memory.iter().max().copied().unwrap_or(0);
    let needed = largest_notify.max(largest_memory);
    let open_files = raise_open_files(needed + 2 * FD_MARGIN);
    let (memory, capped) = feasible_waiters(&plan.memory, 0, open_files);
    let (doubled, capped_notify) = feasible_waiters(
        &plan.observers.iter().map(|n| n * 2).collect::<Vec<_>>(),
        0,
        open_files,
    );
    plan.memory = memory;
    plan.observers = doubled.iter().map(|n| (n / 2).max(1)).collect();
    plan.observers.dedup();
    let capped = capped.or(capped_notify);
    if let Some(why) = &capped {
        eprintln!("  {why}");
    }
    let dir = testkit::tempfile::tempdir()?;
    let server = start_server(pinned, needed + 64, dir.path())?;
    eprintln!("  notification: LOCK.OBSERVE BLOCK against PUBLISH + SUBSCRIBE + GET");
    let notify = notify::run(&server, &plan.observers, plan.rounds, workload.repetitions)?;
    eprintln!("  memory per blocked observer, per subscriber, per idle connection");
    let (memory, memory_drain_s) =
        memory::run(&server, &plan.memory, plan.settle_s, workload.repetitions)?;
    Ok(ElectionResult {
        throughput,
        rounds: plan.rounds,
        value_bytes: crate::measure::lua::leader_value(0).as_bytes().len(),
        notify,
        memory_settle_s: plan.settle_s,
        memory_drain_s,
        memory,
        capped,
    })
}
