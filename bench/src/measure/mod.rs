//! Measuring: the server under test, the load generator and what it sends, and the
//! nine scenarios, each producing its part of the `Results` (one more, the etcd side
//! by side, with the `peers` feature). Nothing here formats a report: what is printed
//! while measuring is progress, on stderr.

pub mod acquireall;
pub mod callgrind;
pub mod contention;
pub mod curves;
pub mod election;
pub mod load;
pub mod lua;
pub mod machine;
pub mod memory;
pub mod natives;
pub mod operation;
#[cfg(feature = "peers")]
pub mod peers;
pub mod profile;
pub mod recipes;
pub mod server;
pub mod sessions;
pub mod throughput;

use std::io;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::results::acquireall::AcquireAllResult;
use crate::results::machine::Natives;
use crate::results::memory::MemoryResult;
use crate::results::profile::ProfileResult;
use crate::results::Results;
use crate::settings::{Scenario, Settings};

/// Starts the server, describes machine and server, runs the scenarios `settings`
/// asks for in their order and stops the server.
pub fn run(settings: &Settings) -> io::Result<Results> {
    let workload = &settings.workload;
    let placement = server::pinning_plan(settings.pin);
    if placement.is_some() {
        server::pin_self()?;
    }
    let server = server::start(placement.is_some())?;
    let mut admin = server::connect(&server)?;
    let machine = machine::describe(&mut admin, &settings.server, placement.as_deref())?;
    let natives = Natives::detect(&mut admin)?;
    drop(admin);
    eprintln!("fencelock bench on {}", machine.one_line());
    eprintln!("{}", natives.describe());
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    let mut throughput = Vec::new();
    if settings.runs(Scenario::Throughput) {
        eprintln!("1+2. throughput and lock cycle");
        throughput = throughput::run(&server, workload, natives)?;
    }
    let mut contention = Vec::new();
    if settings.runs(Scenario::Contention) {
        eprintln!("3. contention");
        contention = contention::run(&server, workload)?;
    }
    let mut memory = MemoryResult::default();
    if settings.runs(Scenario::Memory) {
        eprintln!("4. memory");
        memory = memory::run(&server, workload.memory_locks, workload.repetitions)?;
    }
    let mut profile = ProfileResult::default();
    if settings.runs(Scenario::Profile) {
        eprintln!("5. where the time goes");
        profile = profile::run(&server, workload, natives)?;
    }
    #[cfg_attr(not(feature = "peers"), allow(unused_mut))]
    let mut peers = None;
    #[cfg(feature = "peers")]
    if settings.runs(Scenario::Peers) {
        eprintln!("6. etcd side by side");
        peers = Some(peers::run(&server, workload, placement.is_some())?);
    }
    let mut sessions = None;
    if settings.runs(Scenario::Sessions) {
        eprintln!("7. sessions: LOCK.KEEPALIVE against pipelined refreshes, memory per holding");
        sessions = Some(sessions::run(&server, workload)?);
    }
    let mut on_server = None;
    if settings.runs(Scenario::AcquireAll) {
        eprintln!(
            "8. many keys at once: LOCK.ACQUIREALL, contention over key sets, deadlock detection"
        );
        on_server = Some(acquireall::run(&server, workload)?);
    }
    let mut election_throughput = None;
    if settings.runs(Scenario::Election) {
        eprintln!("9. leader election: LOCK.OBSERVE, LOCK.PROCLAIM, LOCK.ACQUIRE … VALUE");
        election_throughput = Some(election::run(&server, workload, natives)?);
    }
    drop(server);
    let mut curves = None;
    if settings.runs(Scenario::Curves) {
        eprintln!("6. cost curves");
        curves = Some(curves::run(placement.is_some(), workload)?);
    }
    let mut acquireall = None;
    if let Some((cycles, contention_plan, contention)) = on_server {
        acquireall = Some(AcquireAllResult {
            cycles,
            contention_plan,
            contention,
            waits: acquireall::waits(placement.is_some(), workload)?,
        });
    }

    let election = match election_throughput {
        Some(throughput) => Some(election::observers(
            placement.is_some(),
            workload,
            throughput,
        )?),
        None => None,
    };

    Ok(Results {
        machine,
        natives,
        workload: workload.clone(),
        started_unix,
        elapsed_s: started.elapsed().as_secs_f64(),
        throughput,
        contention,
        memory,
        profile,
        peers,
        curves,
        sessions,
        acquireall,
        election,
    })
}
