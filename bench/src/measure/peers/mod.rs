//! The etcd side by side (`make bench-peers`, feature `peers`; not one of the numbered
//! scenarios, the page's "Side by side with etcd"): fencelock side by side with etcd's
//! lock API, in one run. Next to the run's own server (fencelock, persistence off) it
//! starts a second fencelock server that fsyncs every write (`appendonly yes`,
//! `appendfsync always`: etcd fsyncs every commit, so this is the like-for-like
//! durability) and a single-member etcd, all three pinned to the server CPU as the
//! run pins (measure/server.rs), one of them loaded at a time, the others idle. Rows:
//!
//! 1. lock cycles on distinct keys (`cycles`): one client one at a time, 50 clients
//!    one at a time each, 50 clients with 32 cycles in flight each;
//! 2. contention on one key with 4 and 32 client processes (`contended_lock`);
//! 3. the time from a holder's death to the next grant (`takeover`).
//!
//! Every row runs each system once per repetition, in alternating order (ABC, CBA, …).
//! Everything started here is stopped on the way out, on errors too (drops).

pub mod contended_lock;
pub mod cycles;
pub mod etcd;
pub mod interrupt;
pub mod takeover;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::measure::server::{self, flush, Server, SERVER_CPU};
use crate::results::contention::Sample;
use crate::results::peers::{
    ContentionRow, ContentionSeries, CycleRow, CycleSample, CycleSeries, PeersResult, System,
    TakeoverSample, TakeoverSeries, SYSTEMS,
};
use crate::results::Workload;
use crate::stats::percentile_ms;
use etcd::Etcd;

/// Length of one timed cycle run.
const CYCLE_MS: u64 = 3_000;
const SMOKE_CYCLE_MS: u64 = 300;
/// Repetitions of the takeover row in a full run, at least: each is one lease long.
const TAKEOVER_REPETITIONS: usize = 5;

/// While this lives, `interrupt` knows the server (a ctrl-c stops it).
struct Known(PathBuf);

impl Known {
    fn new(server: &Server) -> Self {
        interrupt::register(server.pid(), &server.dir);
        Self(server.dir.clone())
    }
}

impl Drop for Known {
    fn drop(&mut self) {
        interrupt::unregister(&self.0);
    }
}

/// The systems under test, running. `known` comes first: fields drop in order, and a
/// server is forgotten by `interrupt` before it stops.
struct Servers<'a> {
    _known: [Known; 2],
    plain: &'a Server,
    aof: Server,
    etcd: Etcd,
}

impl Servers<'_> {
    fn redis(&self, system: System) -> &Server {
        match system {
            System::FencelockAof => &self.aof,
            _ => self.plain,
        }
    }

    fn pid(&self, system: System) -> Option<u32> {
        match system {
            System::Etcd => self.etcd.pid(),
            _ => self.redis(system).pid(),
        }
    }
}

/// The order of the systems in repetition `rep`.
fn order(rep: usize) -> Vec<System> {
    let mut systems = SYSTEMS.to_vec();
    if rep % 2 == 1 {
        systems.reverse();
    }
    systems
}

pub fn run(plain: &Server, workload: &Workload, pinned: bool) -> io::Result<PeersResult> {
    let load_before = load_average();
    if load_before > 1.0 {
        // Pinning places the servers, it does not reserve their CPU: say so up front.
        eprintln!(
            "  warning: load average {load_before:.2}: other processes are using the CPUs, \
             and latency figures especially will show it"
        );
    }
    let cpu = pinned.then_some(SERVER_CPU);
    let aof = Server::with_options(testkit::Options {
        cpu,
        graceful_stop: true,
        args: ["appendonly", "yes", "appendfsync", "always"]
            .map(String::from)
            .to_vec(),
        ..testkit::Options::default()
    });
    let etcd = Etcd::start(cpu)?;
    eprintln!(
        "  {} on {}, fencelock with AOF always beside it",
        etcd.version,
        filesystem(etcd.dir())
    );
    let servers = Servers {
        _known: [Known::new(plain), Known::new(&aof)],
        plain,
        aof,
        etcd,
    };
    let cycle_ms = if workload.smoke {
        SMOKE_CYCLE_MS
    } else {
        CYCLE_MS
    };
    let cycles = cycle_rows(&servers, workload, cycle_ms)?;
    let contention = contention_rows(&servers, workload)?;
    let takeover = takeover_row(&servers, workload)?;
    Ok(PeersResult {
        etcd: servers.etcd.version.clone(),
        filesystem: filesystem(servers.etcd.dir()),
        placement: match cpu {
            Some(cpu) => format!(
                "etcd and the AOF redis-server pinned to CPU {cpu} as well, one server loaded \
                 at a time (Go sizes GOMAXPROCS from the affinity mask: etcd runs on 1 CPU)"
            ),
            None => "etcd and the AOF redis-server not pinned".into(),
        },
        cycle_ms,
        contention_ms: workload.contention_ms,
        takeover_lease_ms: takeover::LEASE_MS,
        load_before,
        load_after: load_average(),
        cycles,
        contention,
        takeover,
    })
}

fn cycle_rows(servers: &Servers, workload: &Workload, cycle_ms: u64) -> io::Result<Vec<CycleRow>> {
    let shapes = [
        (1, 1),
        (workload.connections, 1),
        (workload.connections, workload.depth),
    ];
    let mut rows: Vec<CycleRow> = shapes
        .iter()
        .map(|&(clients, depth)| CycleRow {
            clients,
            depth,
            series: SYSTEMS
                .iter()
                .map(|&system| CycleSeries {
                    system,
                    samples: Vec::new(),
                })
                .collect(),
        })
        .collect();
    let run_for = Duration::from_millis(cycle_ms);
    for rep in 0..workload.repetitions {
        for row in &mut rows {
            for system in order(rep) {
                let sample = cycle_once(servers, system, row.clients, row.depth, run_for)?;
                eprintln!(
                    "  [rep {}/{}] cycle {:>2} clients × {:>2} in flight  {:<22} {:>9.0} cycles/s  p50 {:>7.2} ms  p99 {:>7.2} ms  server busy {:>3.0}%  client busy {:>3.0}%",
                    rep + 1,
                    workload.repetitions,
                    row.clients,
                    row.depth,
                    system.label(),
                    sample.cycles_per_s,
                    sample.p50_ms,
                    sample.p99_ms,
                    sample.server_busy * 100.0,
                    sample.client_busy * 100.0
                );
                let series = row
                    .series
                    .iter_mut()
                    .find(|s| s.system == system)
                    .expect("a series per system");
                series.samples.push(sample);
            }
        }
    }
    Ok(rows)
}

fn cycle_once(
    servers: &Servers,
    system: System,
    clients: usize,
    depth: usize,
    run_for: Duration,
) -> io::Result<CycleSample> {
    if system != System::Etcd {
        flush(&mut server::connect(servers.redis(system))?)?;
    }
    let server_before = servers.pid(system).and_then(process_cpu_seconds);
    let client_before = process_cpu_seconds(std::process::id());
    let measured = match system {
        System::Etcd => cycles::etcd(&servers.etcd.url, clients, depth, run_for)?,
        _ => cycles::fencelock(servers.redis(system).port, clients, depth, run_for)?,
    };
    let share = |before: Option<f64>, after: Option<f64>| {
        before
            .zip(after)
            .map_or(f64::NAN, |(b, a)| (a - b) / measured.seconds)
    };
    let server_busy = share(
        server_before,
        servers.pid(system).and_then(process_cpu_seconds),
    );
    let client_busy = share(client_before, process_cpu_seconds(std::process::id()));
    Ok(CycleSample {
        cycles: measured.cycles,
        cycles_per_s: measured.cycles as f64 / measured.seconds.max(1e-9),
        p50_ms: percentile_ms(&measured.latencies, 50.0),
        p99_ms: percentile_ms(&measured.latencies, 99.0),
        server_busy,
        client_busy,
    })
}

fn contention_rows(servers: &Servers, workload: &Workload) -> io::Result<Vec<ContentionRow>> {
    let mut rows: Vec<ContentionRow> = workload
        .contention_clients
        .iter()
        .map(|&clients| ContentionRow {
            clients,
            series: SYSTEMS
                .iter()
                .map(|&system| ContentionSeries {
                    system,
                    samples: Vec::new(),
                })
                .collect(),
        })
        .collect();
    let mut runs = 0;
    for rep in 0..workload.repetitions {
        for row in &mut rows {
            for system in order(rep) {
                runs += 1;
                let sample = contention_once(servers, system, row.clients, workload, runs)?;
                eprintln!(
                    "  [rep {}/{}] contention {:>2} clients  {:<22} {:>7.0} grants/s  wait p50 {:>7.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  Jain {:.3}",
                    rep + 1,
                    workload.repetitions,
                    row.clients,
                    system.label(),
                    sample.grants_per_s,
                    sample.p50_ms,
                    sample.p99_ms,
                    sample.max_ms,
                    sample.jain
                );
                let series = row
                    .series
                    .iter_mut()
                    .find(|s| s.system == system)
                    .expect("a series per system");
                series.samples.push(sample);
            }
        }
    }
    Ok(rows)
}

fn contention_once(
    servers: &Servers,
    system: System,
    clients: usize,
    workload: &Workload,
    run: usize,
) -> io::Result<Sample> {
    let name = format!("peers/contended/{run}");
    let target = match system {
        System::Etcd => contended_lock::Target::Etcd {
            url: &servers.etcd.url,
            name: &name,
        },
        _ => {
            let redis = servers.redis(system);
            flush(&mut server::connect(redis)?)?;
            contended_lock::Target::Fencelock { port: redis.port }
        }
    };
    contended_lock::run_once(&target, clients, workload.contention_ms)
}

fn takeover_row(servers: &Servers, workload: &Workload) -> io::Result<Vec<TakeoverSeries>> {
    let repetitions = if workload.smoke {
        workload.repetitions
    } else {
        workload.repetitions.max(TAKEOVER_REPETITIONS)
    };
    // The durable server's expiry is the plain one's: one fencelock series.
    let systems = [System::Fencelock, System::Etcd];
    let mut series: Vec<TakeoverSeries> = systems
        .iter()
        .map(|&system| TakeoverSeries {
            system,
            samples: Vec::new(),
        })
        .collect();
    for rep in 0..repetitions {
        let mut order: Vec<usize> = (0..systems.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for s in order {
            let entry = &mut series[s];
            let key = format!("peers:takeover:{rep}");
            let target = match entry.system {
                System::Etcd => takeover::Target::Etcd {
                    url: &servers.etcd.url,
                },
                _ => takeover::Target::Fencelock {
                    port: servers.plain.port,
                },
            };
            let sample: TakeoverSample = takeover::run_once(&target, &key)?;
            eprintln!(
                "  [rep {}/{}] holder killed  {:<22} next grant {:>8.1} ms after the kill, {:>6.1} ms past the lease end",
                rep + 1,
                repetitions,
                entry.system.label(),
                sample.kill_to_grant_ms,
                sample.past_lease_end_ms
            );
            entry.samples.push(sample);
        }
    }
    Ok(series)
}

/// CPU time (user + system) of process `pid`, all its threads, those gone included,
/// from `/proc/<pid>/stat` (in the kernel's USER_HZ ticks, 100 a second).
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces:
    // state is field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// The 1-minute load average, from `/proc/loadavg`; NaN where there is none.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// "ext4 (/dev/vda)": the file system holding `path`, from `/proc/mounts` (the longest
/// mount point that contains it).
fn filesystem(path: &Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (device, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            path.starts_with(point)
                .then(|| (point.len(), format!("{kind} ({device})")))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "an unknown file system".into(), |(_, fs)| fs)
}
