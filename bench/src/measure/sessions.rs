//! Scenario 7: sessions, on the benchmark's own server.
//!
//! - Keepalive against refreshes: `n` locks held in one session (1, 100, 1,000 and
//!   10,000), each size built untimed on an emptied server; then, `repetitions` times
//!   in alternating order, `LOCK.KEEPALIVE session ttl` (32 in flight) and rounds of
//!   `n` pipelined `LOCK.REFRESH key token ttl`, one for each of the same locks (a
//!   round sent whole, in one write, as a client's pipeline would), as many rounds as
//!   keepalives, enough of them for at least `renewals` leases moved. Counted as the
//!   cost curves count (`curves::Meter`): the server event loop's CPU time over the
//!   run (`/proc/<pid>/schedstat`), less the idle server's share pro rata of its wall
//!   time; and beside it the commands' own time from `INFO commandstats` (inside the
//!   command only: what reading, parsing and replying cost is not in it). Every reply
//!   is checked: a keepalive must count all `n` holdings, each refresh must answer 1.
//! - Memory per held lock as scenario 4 measures it (`memory::pipeline`,
//!   `settled_memory`): the `used_memory` delta over `n` locks with server tokens
//!   and no session, with one session for all of them, and with a session each (the
//!   session index included either way: the module allocates through Redis), then
//!   the bytes left per lock once each is released with `LOCK.RELEASE`. Session names
//!   are 32 hex characters, as random as a token.

use std::io;
use std::time::{Duration, Instant};

use testkit::resp::{encode, push_decimal, Conn};

use crate::measure::curves::{self, idle_share, pipelined, Expect, Meter, DEPTH};
use crate::measure::memory::{expect, per_lock, pipeline, settled_memory};
use crate::measure::server::{self, command_stats, flush, Server};
use crate::results::sessions::{KeepalivePoint, SessionMemory, SessionsResult};
use crate::results::Workload;

/// The lease of every holding, and the one each keepalive and refresh sets again: the
/// cost curves' ten minutes.
const LEASE: &[u8] = curves::LEASE;
const LEASE_MS: u64 = 600_000;
const KEY: &[u8] = b"session:lock:";

/// The sizes and counts of a run, full or smoke.
struct Plan {
    sizes: Vec<u64>,
    /// Leases moved per measurement, at least.
    renewals: u64,
    /// Keepalives (rounds of refreshes) per measurement, at least.
    min_calls: u64,
    /// Length of the idle measurement at each size.
    idle: Duration,
    /// Locks held at once in each memory measurement.
    memory_holdings: u64,
}

impl Plan {
    fn new(smoke: bool) -> Self {
        let sizes = vec![1, 100, 1_000, 10_000];
        if smoke {
            Self {
                sizes,
                renewals: 20_000,
                min_calls: 5,
                idle: Duration::from_millis(60),
                memory_holdings: 10_000,
            }
        } else {
            Self {
                sizes,
                renewals: 200_000,
                min_calls: 50,
                idle: Duration::from_millis(400),
                memory_holdings: 10_000,
            }
        }
    }

    fn calls(&self, holdings: u64) -> u64 {
        self.renewals.div_ceil(holdings.max(1)).max(self.min_calls)
    }
}

/// Session name number `i`: 32 lowercase hex characters (what a client draws at
/// random, and what the module stores in 16 bytes, as a generated token).
fn session_name(i: u64) -> Vec<u8> {
    format!(
        "{:016x}{:016x}",
        0x5e55_10a5_0000_0000u64 ^ i,
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
    .into_bytes()
}

fn key(i: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(KEY.len() + 20);
    key.extend_from_slice(KEY);
    push_decimal(&mut key, i);
    key
}

/// Acquires locks `0..n` pipelined on a fresh connection, lock `i` in the session
/// `session(i)` names (none for `None`), and returns the token granted for each.
fn hold(
    server: &Server,
    n: u64,
    session: impl Fn(u64) -> Option<Vec<u8>>,
) -> io::Result<Vec<Vec<u8>>> {
    let mut tokens = vec![Vec::new(); usize::try_from(n).unwrap_or(0)];
    pipeline(
        server,
        n,
        |i, out| match session(i) {
            Some(s) => encode(
                out,
                &[b"LOCK.ACQUIRE", &key(i), LEASE, b"SESSION", s.as_slice()],
            ),
            None => encode(out, &[b"LOCK.ACQUIRE", &key(i), LEASE]),
        },
        |i, reply| {
            let (token, _) = reply
                .grant()
                .ok_or_else(|| io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}")))?;
            tokens[i as usize] = token.to_vec();
            Ok(())
        },
    )?;
    Ok(tokens)
}

/// Releases locks `0..n`, each with its token.
fn release(server: &Server, tokens: &[Vec<u8>]) -> io::Result<()> {
    pipeline(
        server,
        tokens.len() as u64,
        |i, out| encode(out, &[b"LOCK.RELEASE", &key(i), &tokens[i as usize]]),
        |_, reply| expect("LOCK.RELEASE", reply.integer() == Some(1), &reply),
    )
}

/// One size: the locks held in one session, then every repetition's keepalive and
/// refresh runs in alternating order.
fn measure_size(
    server: &Server,
    admin: &mut Conn,
    plan: &Plan,
    holdings: u64,
    repetitions: usize,
) -> io::Result<(KeepalivePoint, f64)> {
    flush(admin)?;
    let session = session_name(holdings);
    let tokens = hold(server, holdings, |_| Some(session.clone()))?;
    let keys: Vec<Vec<u8>> = (0..holdings).map(key).collect();
    let mut conn = server::connect(server)?;
    let meter = Meter {
        idle_share: idle_share(server, plan.idle),
    };
    let calls = plan.calls(holdings);
    let count = i64::try_from(holdings).unwrap_or(i64::MAX);
    let mut point = KeepalivePoint {
        holdings,
        calls,
        keepalive_us: Vec::new(),
        refreshes_us: Vec::new(),
        keepalive_command_us: Vec::new(),
        refreshes_command_us: Vec::new(),
    };
    for rep in 0..repetitions {
        let mut turns = [true, false];
        if rep % 2 == 1 {
            turns.reverse();
        }
        for keepalive in turns {
            let command = if keepalive {
                "lock.keepalive"
            } else {
                "lock.refresh"
            };
            let (usec_before, calls_before) = command_stats(admin, command)?;
            let cpu = meter.per_op(server, calls, || {
                pipelined(&mut conn, calls, |_, out, expects| {
                    if keepalive {
                        encode(out, &[b"LOCK.KEEPALIVE", &session, LEASE]);
                        expects.push(Expect::Integer(count));
                    } else {
                        for (key, token) in keys.iter().zip(&tokens) {
                            encode(out, &[b"LOCK.REFRESH", key, token, LEASE]);
                            expects.push(Expect::One);
                        }
                    }
                })
            })?;
            let (usec_after, calls_after) = command_stats(admin, command)?;
            let sent = if keepalive { calls } else { calls * holdings };
            if calls_after - calls_before != sent as f64 {
                return Err(io::Error::other(format!(
                    "INFO commandstats counted {} {command} calls, {sent} were sent",
                    calls_after - calls_before
                )));
            }
            let command_us = (usec_after - usec_before) / calls as f64;
            if keepalive {
                point.keepalive_us.push(cpu);
                point.keepalive_command_us.push(command_us);
            } else {
                point.refreshes_us.push(cpu);
                point.refreshes_command_us.push(command_us);
            }
        }
        eprintln!(
            "  [rep {}/{repetitions}] {holdings} holdings: LOCK.KEEPALIVE {:.2} µs, {holdings} pipelined LOCK.REFRESH {:.2} µs of server CPU ({:.3}×)",
            rep + 1,
            point.keepalive_us[rep],
            point.refreshes_us[rep],
            point.keepalive_us[rep] / point.refreshes_us[rep]
        );
    }
    drop(conn);
    flush(admin)?;
    Ok((point, meter.idle_share))
}

/// Bytes per held lock and per released lock, of `n` locks each in the session
/// `session(i)` names.
fn measure_memory(
    server: &Server,
    probe: &mut Conn,
    n: u64,
    session: impl Fn(u64) -> Option<Vec<u8>>,
) -> io::Result<(f64, f64)> {
    flush(probe)?;
    let before = settled_memory(probe)?;
    let tokens = hold(server, n, session)?;
    let held = settled_memory(probe)?;
    release(server, &tokens)?;
    let left = settled_memory(probe)?;
    Ok((per_lock(before, held, n), per_lock(before, left, n)))
}

fn memory(server: &Server, n: u64, repetitions: usize) -> io::Result<SessionMemory> {
    let mut probe = server::connect(server)?;
    let mut result = SessionMemory {
        holdings: n,
        ..SessionMemory::default()
    };
    let one = session_name(0);
    // Alternating order, as scenario 4: none, one session, a session each, then the
    // reverse.
    for rep in 0..repetitions {
        let mut turns = [0, 1, 2];
        if rep % 2 == 1 {
            turns.reverse();
        }
        for turn in turns {
            let (what, (held, left)) = match turn {
                0 => (
                    "no session",
                    measure_memory(server, &mut probe, n, |_| None)?,
                ),
                1 => (
                    "one session",
                    measure_memory(server, &mut probe, n, |_| Some(one.clone()))?,
                ),
                _ => (
                    "a session each",
                    measure_memory(server, &mut probe, n, |i| Some(session_name(i + 1)))?,
                ),
            };
            let (held_of, left_of) = match turn {
                0 => (&mut result.plain_held, &mut result.plain_left),
                1 => (&mut result.one_session_held, &mut result.one_session_left),
                _ => (&mut result.own_sessions_held, &mut result.own_sessions_left),
            };
            held_of.push(held);
            left_of.push(left);
            eprintln!(
                "  [rep {}/{repetitions}] {n} locks, {what}: {held:.1} B per held lock, {left:.2} B left per released lock",
                rep + 1
            );
        }
    }
    flush(&mut probe)?;
    Ok(result)
}

pub fn run(server: &Server, workload: &Workload) -> io::Result<SessionsResult> {
    debug_assert_eq!(LEASE, LEASE_MS.to_string().as_bytes());
    let plan = Plan::new(workload.smoke);
    let mut admin = server::connect(server)?;
    let mut points = Vec::new();
    let mut idle_cpu_share = Vec::new();
    for &holdings in &plan.sizes {
        let started = Instant::now();
        let (point, idle) =
            measure_size(server, &mut admin, &plan, holdings, workload.repetitions)?;
        eprintln!(
            "  {holdings} holdings: {:.1} s; idle server {:.1}% of a CPU",
            started.elapsed().as_secs_f64(),
            idle * 100.0
        );
        points.push(point);
        idle_cpu_share.push(idle);
    }
    let memory = memory(server, plan.memory_holdings, workload.repetitions)?;
    Ok(SessionsResult {
        lease_ms: LEASE_MS,
        renewals: plan.renewals,
        depth: DEPTH,
        points,
        memory,
        idle_cpu_share,
    })
}
