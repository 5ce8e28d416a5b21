//! Scenario 6: cost curves. What each command costs the server as one thing grows —
//! the holders of one semaphore, the waiters queued on one key, the locks held on
//! distinct keys — measured as `profile` measures it: the server's event-loop CPU time
//! (`/proc/<pid>/schedstat` of its main thread) over a run of the command, divided by
//! the operations in it. Each size is built once (untimed), then every operation runs
//! `repetitions` times in alternating order. What the idle server spends at that size
//! (its timers: at many clients, `clientsCron` visits them all) is measured first and
//! taken off each run pro rata of its wall time, so that a curve is the command's own.
//! And memory per holder, waiter and lock, at each family's largest size.
//!
//! Each size has a server of its own (so that nothing one state leaves behind is
//! measured with the next), started as the benchmark's is and with room for tens of
//! thousands of clients (`maxclients`, a raised open-files limit, which the server
//! inherits from this process), several loopback addresses to spread them over
//! (`crowd`), and room for the holders and waiters (`fencelock.max-holders`,
//! `max-waiters`). Where the open-files limit cannot be raised far enough (no
//! `CAP_SYS_RESOURCE`), the largest waiter count is lowered to what fits and the
//! result says so.

pub mod crowd;
mod holders;
mod locks;
pub mod waiters;

use std::io::{self, Write};
use std::time::{Duration, Instant};

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use testkit::resp::{Conn, Reply};

use crate::measure::memory::settled_memory;
use crate::measure::server::{self, info_field, Server};
use crate::results::curves::{
    Curve, CurvesResult, Family, LongTimerCheck, Memory, Op, Point, Sizes,
};
use crate::results::Workload;
use holders::Holders;
use locks::Locks;
use waiters::Waiters;

/// Lease of everything held: ten minutes, longer than any session. Not longer: on
/// Redis 7.0 a module timer more than 2^31 µs (35.8 minutes) away overflows the event
/// loop's `int` arithmetic and the loop stops sleeping (`long_timer_check`).
pub const LEASE: &[u8] = b"600000";
/// `LEASE` as a number, for the results.
const LEASE_MS: u64 = 600_000;
/// An hour: the lease of `long_timer_check`.
const LONG_LEASE: &[u8] = b"3600000";
/// Commands in flight on the measuring connection (as in `profile`'s runs).
pub const DEPTH: usize = 32;
/// Lets the server finish what came before a measurement (replies, frees).
const SETTLE: Duration = Duration::from_millis(10);
/// File descriptors kept free beside the waiters, in this process and in the server:
/// Redis reserves 32, and each side has a few connections and files of its own.
pub const FD_MARGIN: u64 = 128;
/// Stride of `spread`: a prime above every size (so coprime with each: a run visits
/// every item once before any twice) whose remainders modulo powers of ten are far
/// from 0 (so consecutive visits land far apart).
const STRIDE: u64 = 2_654_435_761;

/// The sizes and counts of a run, full or smoke.
struct Plan {
    holders: Vec<u64>,
    waiters: Vec<u64>,
    locks: Vec<u64>,
    /// Operations per measurement of a pipelined curve.
    ops: u64,
    handoffs: u64,
    /// Connections that join and leave in each measurement of `JoinLeave`.
    joins: usize,
    /// Length of the idle measurement at each size.
    idle: Duration,
    /// Wait before reading the memory of many clients: Redis shrinks a client's
    /// buffers once it has been idle 2 s, within a second after (`clientsCron`).
    client_settle: Duration,
}

impl Plan {
    fn new(smoke: bool) -> Self {
        if smoke {
            Self {
                holders: vec![1, 100, 1_000],
                waiters: vec![1, 100, 1_000],
                locks: vec![1, 1_000, 10_000],
                ops: 1_000,
                handoffs: 300,
                joins: 100,
                idle: Duration::from_millis(60),
                client_settle: Duration::ZERO,
            }
        } else {
            Self {
                holders: vec![1, 100, 10_000],
                waiters: vec![1, 1_000, 100_000],
                locks: vec![1, 10_000, 1_000_000],
                ops: 10_000,
                handoffs: 2_000,
                joins: 1_000,
                idle: Duration::from_millis(400),
                client_settle: Duration::from_secs(4),
            }
        }
    }

    fn sizes(&self, family: Family) -> &[u64] {
        match family {
            Family::Holders => &self.holders,
            Family::Waiters => &self.waiters,
            Family::Locks => &self.locks,
        }
    }

    fn ops(&self, op: Op) -> u64 {
        match op {
            Op::Handoff => self.handoffs,
            Op::JoinLeave => self.joins as u64,
            _ => self.ops,
        }
    }
}

/// Item `i` of a run over `n` items: every item once before any twice, in an order
/// that jumps across them all.
pub fn spread(i: u64, n: u64) -> u64 {
    i.wrapping_mul(STRIDE) % n.max(1)
}

/// A 22-character token: an 8-byte prefix and `i` in 14 digits (the length of the
/// throughput scenario's chosen tokens).
pub fn token(prefix: &[u8; 8], i: u64) -> [u8; 22] {
    let mut token = [b'0'; 22];
    token[..8].copy_from_slice(prefix);
    let mut rest = i;
    for slot in token[8..].iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    token
}

/// What a reply must be for its command to have done what the curve measures.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    Grant,
    One,
    Nil,
    /// `LOCK.INFO`'s field/value pairs.
    Fields,
    Positive,
    /// This very integer (`LOCK.KEEPALIVE`'s count).
    Integer(i64),
}

impl Expect {
    fn accepts(self, reply: &Reply) -> bool {
        match self {
            Expect::Grant => reply.grant().is_some(),
            Expect::One => reply.integer() == Some(1),
            Expect::Nil => reply.is_nil(),
            Expect::Fields => matches!(reply, Reply::Array(Some(fields)) if !fields.is_empty()),
            Expect::Positive => reply.integer().is_some_and(|n| n > 0),
            Expect::Integer(n) => reply.integer() == Some(n),
        }
    }
}

/// Runs `ops` operations on `conn`, `DEPTH` commands in flight: `op(i, out, expect)`
/// appends operation `i`'s commands to `out` and what each reply must be to `expect`.
/// Any other reply stops the run.
pub fn pipelined(
    conn: &mut Conn,
    ops: u64,
    mut op: impl FnMut(u64, &mut Vec<u8>, &mut Vec<Expect>),
) -> io::Result<()> {
    let mut out = Vec::with_capacity(DEPTH * 96);
    let mut expects = Vec::with_capacity(DEPTH + 2);
    let mut next = 0;
    while next < ops {
        out.clear();
        expects.clear();
        while next < ops && expects.len() < DEPTH {
            op(next, &mut out, &mut expects);
            next += 1;
        }
        conn.send(&out)?;
        for expect in &expects {
            let reply = conn.read_reply()?;
            if !expect.accepts(&reply) {
                return Err(io::Error::other(format!(
                    "expected {expect:?}, the server replied {reply:?}"
                )));
            }
        }
    }
    Ok(())
}

fn cpu(server: &Server) -> f64 {
    server::cpu_seconds(server).unwrap_or(f64::NAN)
}

/// Share of a CPU the server takes doing nothing for `length`.
pub fn idle_share(server: &Server, length: Duration) -> f64 {
    std::thread::sleep(SETTLE);
    let (before, started) = (cpu(server), Instant::now());
    std::thread::sleep(length);
    (cpu(server) - before) / started.elapsed().as_secs_f64()
}

/// Server CPU per operation of a run, with the idle server's share taken off.
pub struct Meter {
    pub idle_share: f64,
}

impl Meter {
    /// µs of `server`'s CPU per operation of `run`, which does `ops` operations.
    pub fn per_op(
        &self,
        server: &Server,
        ops: u64,
        run: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<f64> {
        std::thread::sleep(SETTLE);
        let (before, started) = (cpu(server), Instant::now());
        run()?;
        let wall = started.elapsed().as_secs_f64();
        let busy = cpu(server) - before - self.idle_share * wall;
        Ok(busy * 1e6 / ops as f64)
    }
}

/// Raises this process's open-files limit as far as `wanted` (the soft one up to the
/// hard one; the hard one too where the process may), and returns what it is now:
/// the curves' server, started after this, inherits it.
pub fn raise_open_files(wanted: u64) -> u64 {
    let now = getrlimit(Resource::Nofile);
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(wanted);
    let target = wanted.min(ceiling);
    let hard = now.maximum.unwrap_or(u64::MAX);
    if hard < target
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum: Some(target),
            },
        )
        .is_ok()
    {
        return target;
    }
    let soft = target.min(hard);
    if now.current.is_some_and(|current| current < soft) {
        let raised = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(soft),
                maximum: now.maximum,
            },
        );
        if raised.is_err() {
            return now.current.unwrap_or(0);
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The waiter counts this machine can hold: the planned ones up to what the
/// open-files limit leaves room for (the server and this process each keep one socket
/// per waiter), the largest rounded down to a thousand; and why, if any was lowered.
pub fn feasible_waiters(
    planned: &[u64],
    joins: usize,
    open_files: u64,
) -> (Vec<u64>, Option<String>) {
    let room = open_files.saturating_sub(FD_MARGIN + joins as u64 + 1);
    let largest = planned.iter().copied().max().unwrap_or(0);
    if largest <= room {
        return (planned.to_vec(), None);
    }
    let fit = if room >= 10_000 {
        room / 1_000 * 1_000
    } else {
        room / 100 * 100
    };
    let mut sizes: Vec<u64> = planned.iter().map(|&n| n.min(fit)).collect();
    sizes.dedup();
    let why = format!(
        "{largest} waiters planned, {fit} measured: the open-files limit is {open_files} \
         (a socket per waiter in the server and in the load generator) and this process \
         could not raise it (a higher hard limit needs CAP_SYS_RESOURCE)"
    );
    (sizes, Some(why))
}

/// The server for the curves (and scenario 8's waits): the benchmark's (module loaded,
/// persistence off, pinned as the others), listening on every address of `crowd`, with
/// room for the clients.
pub fn start_server(pinned: bool, clients: u64, dir: &std::path::Path) -> io::Result<Server> {
    let addresses: Vec<String> = (0..crowd::ADDRESSES)
        .map(|i| crowd::address(usize::from(i)).to_string())
        .collect();
    // `bind` with several addresses takes one argument each, which testkit's
    // name-value pairs cannot pass: a config file can.
    let config = dir.join("curves.conf");
    std::fs::File::create(&config)?.write_all(
        format!(
            "bind {}\nmaxclients {clients}\ntcp-backlog 511\n",
            addresses.join(" ")
        )
        .as_bytes(),
    )?;
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
    server::start_with(
        pinned,
        testkit::Options {
            args: strings(&["include", &config.display().to_string()]),
            module_args: strings(&["max-holders", "1000000", "max-waiters", "100000000"]),
            ..testkit::Options::default()
        },
    )
}

pub fn connected_clients(admin: &mut Conn) -> io::Result<u64> {
    info_field(admin, "clients", "connected_clients")?
        .parse()
        .map_err(|e| io::Error::other(format!("connected_clients: {e}")))
}

/// Waits until the server has let go of closed clients, down to `count`.
pub fn wait_for_clients(admin: &mut Conn, count: u64) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = connected_clients(admin)?;
        if now <= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "{now} clients still connected 30 s after closing, {count} expected"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The state of one family at one size.
enum State {
    Holders(Holders),
    Waiters(Box<Waiters>),
    Locks(Locks),
}

/// One server with one state: every state is built on a server of its own, so that
/// nothing one leaves behind (a grown hash table, a timer, a busy event loop) is
/// measured with the next.
struct Session {
    server: Server,
    admin: Conn,
    conn: Conn,
}

/// What every session's server is started with.
struct Launch<'a> {
    pinned: bool,
    clients: u64,
    dir: &'a std::path::Path,
}

impl Session {
    fn start(launch: &Launch) -> io::Result<Self> {
        let server = start_server(launch.pinned, launch.clients, launch.dir)?;
        Ok(Self {
            admin: server::connect(&server)?,
            conn: server::connect(&server)?,
            server,
        })
    }

    fn meter(&self, idle: Duration) -> Meter {
        Meter {
            idle_share: idle_share(&self.server, idle),
        }
    }

    /// Builds `family` at `size`; with `memory`, also records its bytes per item (for
    /// waiters, also without the clients' own buffers).
    fn build(
        &mut self,
        plan: &Plan,
        family: Family,
        size: u64,
        memory: Option<&mut Vec<Memory>>,
    ) -> io::Result<State> {
        let measure = memory.is_some();
        let reading = |admin: &mut Conn| -> io::Result<f64> {
            if !measure {
                return Ok(0.0);
            }
            Ok(settled_memory(admin)? as f64)
        };
        let mut figures = Vec::new();
        let state = match family {
            Family::Holders => {
                let before = reading(&mut self.admin)?;
                let limit = plan.holders.iter().max().unwrap_or(&1) * 2;
                let holders = Holders::build(&mut self.conn, size, limit)?;
                let after = reading(&mut self.admin)?;
                figures.push(("per holder of one semaphore".to_string(), before, after));
                State::Holders(holders)
            }
            Family::Locks => {
                let before = reading(&mut self.admin)?;
                let locks = Locks::build(&mut self.conn, size)?;
                let after = reading(&mut self.admin)?;
                figures.push((
                    "per held lock (server-generated token)".to_string(),
                    before,
                    after,
                ));
                State::Locks(locks)
            }
            Family::Waiters => {
                let port = self.server.port;
                let mut waiters = Waiters::start(port, LEASE)?;
                let settled = match plan.client_settle.as_secs() {
                    0 => "read at once".to_string(),
                    s => format!("read {s} s after"),
                };
                if measure {
                    // The same number of connections that only sent a PING: what of
                    // a waiter is its connection's.
                    let clients = connected_clients(&mut self.admin)?;
                    let before = reading(&mut self.admin)?;
                    let idle = waiters::idle_clients(port, size)?;
                    std::thread::sleep(plan.client_settle);
                    let with_idle = reading(&mut self.admin)?;
                    drop(idle);
                    wait_for_clients(&mut self.admin, clients)?;
                    figures.push((
                        format!("per idle connection (sent one PING), {settled}"),
                        before,
                        with_idle,
                    ));
                }
                let before = reading(&mut self.admin)?;
                waiters.fill(&mut self.admin, size)?;
                if measure {
                    std::thread::sleep(plan.client_settle);
                }
                let after = reading(&mut self.admin)?;
                figures.push((
                    format!("per waiter, its connection included, {settled}"),
                    before,
                    after,
                ));
                // After the readings: their connections are not the waiters'.
                waiters.add_joiners(plan.joins)?;
                State::Waiters(Box::new(waiters))
            }
        };
        if let Some(memory) = memory {
            memory.extend(figures.into_iter().map(|(what, before, after)| Memory {
                what,
                family,
                size,
                bytes: (after - before) / size as f64,
            }));
        }
        Ok(state)
    }

    fn measure(
        &mut self,
        state: &mut State,
        plan: &Plan,
        op: Op,
        rep: usize,
        meter: &Meter,
    ) -> io::Result<f64> {
        let ops = plan.ops(op);
        let Session {
            server,
            admin,
            conn,
        } = self;
        meter.per_op(server, ops, || match state {
            State::Holders(holders) => holders.run(conn, op, rep, ops),
            State::Waiters(waiters) => waiters.run(conn, admin, op, ops),
            State::Locks(locks) => locks.run(conn, op, rep, ops),
        })
    }
}

/// The curves of one family at one size, on a server of their own: the state built
/// once, every operation `repetitions` times in alternating order; and the idle
/// server's share before and after them (the same, or an operation left the server
/// busy and every figure after it counts that too).
fn measure_size(
    plan: &Plan,
    launch: &Launch,
    repetitions: usize,
    family: Family,
    size: u64,
    memory: &mut Vec<Memory>,
) -> io::Result<(Vec<Point>, f64, f64)> {
    let ops: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|op| op.family() == family)
        .collect();
    let mut points: Vec<Point> = ops
        .iter()
        .map(|_| Point {
            size,
            samples: Vec::new(),
        })
        .collect();
    let largest = size == plan.sizes(family).last().copied().unwrap_or(0);
    let mut session = Session::start(launch)?;
    let mut state = session.build(plan, family, size, largest.then_some(memory))?;
    let meter = session.meter(plan.idle);
    for rep in 0..repetitions {
        let mut order: Vec<usize> = (0..ops.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for k in order {
            let sample = session.measure(&mut state, plan, ops[k], rep, &meter)?;
            points[k].samples.push(sample);
        }
    }
    let idle_after = idle_share(&session.server, plan.idle);
    Ok((points, meter.idle_share, idle_after))
}

/// Handoffs under a one-hour lease (the module times the next handoff for the lease's
/// end, past 2^31 µs): the idle server before and after a few handoffs that leave a
/// waiter queued.
fn long_timer_check(plan: &Plan, launch: &Launch) -> io::Result<LongTimerCheck> {
    const WAITERS: u64 = 2;
    const HANDOFFS: u64 = 10;
    let mut session = Session::start(launch)?;
    let mut waiters = Waiters::start(session.server.port, LONG_LEASE)?;
    waiters.fill(&mut session.admin, WAITERS)?;
    let idle_before = idle_share(&session.server, plan.idle);
    waiters.handoffs(HANDOFFS)?;
    let idle_after = idle_share(&session.server, plan.idle);
    eprintln!(
        "  {WAITERS} waiters, a one-hour lease, {HANDOFFS} handoffs: idle server {:.1}% of a CPU before, {:.1}% after",
        idle_before * 100.0,
        idle_after * 100.0
    );
    Ok(LongTimerCheck {
        waiters: WAITERS,
        handoffs: HANDOFFS,
        lease_ms: 3_600_000,
        idle_before,
        idle_after,
    })
}

pub fn run(pinned: bool, workload: &Workload) -> io::Result<CurvesResult> {
    debug_assert_eq!(LEASE, LEASE_MS.to_string().as_bytes());
    let mut plan = Plan::new(workload.smoke);
    let planned = Plan::new(workload.smoke);
    let largest_waiters = plan.waiters.iter().copied().max().unwrap_or(0);
    let open_files = raise_open_files(largest_waiters + plan.joins as u64 + 2 * FD_MARGIN);
    let (waiter_sizes, capped) = feasible_waiters(&plan.waiters, plan.joins, open_files);
    if let Some(why) = &capped {
        eprintln!("  {why}");
    }
    plan.waiters = waiter_sizes;
    let dir = testkit::tempfile::tempdir()?;
    let launch = Launch {
        pinned,
        clients: plan.waiters.iter().max().unwrap_or(&0) + plan.joins as u64 + 64,
        dir: dir.path(),
    };

    let mut result = CurvesResult {
        sizes: Vec::new(),
        ops: plan.ops,
        handoffs: plan.handoffs,
        joins: plan.joins as u64,
        depth: DEPTH,
        lease_ms: LEASE_MS,
        curves: Vec::new(),
        memory: Vec::new(),
        long_timer: None,
    };
    for family in Family::ALL {
        let mut curves: Vec<Curve> = Op::ALL
            .into_iter()
            .filter(|op| op.family() == family)
            .map(|op| Curve {
                op,
                command: op.label().to_string(),
                commands_per_op: op.commands(),
                points: Vec::new(),
            })
            .collect();
        let mut sizes = Sizes {
            family,
            planned: planned.sizes(family).to_vec(),
            measured: plan.sizes(family).to_vec(),
            capped: (family == Family::Waiters)
                .then(|| capped.clone())
                .flatten(),
            idle_cpu_share: Vec::new(),
            idle_after_cpu_share: Vec::new(),
        };
        for &size in plan.sizes(family) {
            let started = Instant::now();
            let (points, before, after) = measure_size(
                &plan,
                &launch,
                workload.repetitions,
                family,
                size,
                &mut result.memory,
            )?;
            for (curve, point) in curves.iter_mut().zip(points) {
                curve.points.push(point);
            }
            sizes.idle_cpu_share.push(before);
            sizes.idle_after_cpu_share.push(after);
            eprintln!(
                "  {size} {}: {:.1} s; idle server {:.1}% of a CPU before, {:.1}% after",
                family.unit(size),
                started.elapsed().as_secs_f64(),
                before * 100.0,
                after * 100.0
            );
        }
        for curve in &curves {
            let medians: Vec<String> = curve
                .points
                .iter()
                .map(|p| format!("{:>7.2}", crate::stats::spread(&p.samples).median))
                .collect();
            eprintln!("    {:<62} {} µs", curve.command, medians.join(" "));
        }
        result.sizes.push(sizes);
        result.curves.extend(curves);
        if family == Family::Waiters {
            result.long_timer = Some(long_timer_check(&plan, &launch)?);
        }
    }
    Ok(result)
}
