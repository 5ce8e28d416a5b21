//! What an acquire that waits costs the server, deadlock detection on against off
//! (`CONFIG SET fencelock.deadlock-detection yes|no`), with thousands of waiters
//! already queued (10,000; 1,000 in a smoke run), in two shapes, each built once on a
//! server of its own (the cost curves' server: many clients over five loopback
//! addresses):
//!
//! - `OneKey`: one key held, every waiter queued on it (`LOCK.ACQUIRE … TOKEN w BLOCK
//!   0`, each with a token of its own that also holds a key of its own).
//! - `Chains`: the waiters spread over chains of `CHAIN` keys, `PER_KEY` on each key:
//!   each key is held by a session that also waits for the next key of its chain (the
//!   first in that queue), the other waiters have tokens that hold a key of their own.
//!   A new wait for the first key of a chain waits, through the holders, for every
//!   holder down the chain: detection walks `CHAIN` owners and keys before it finds no
//!   cycle. That it walks them all is checked once: the last holder of a chain asking
//!   for its first key is refused with `DEADLOCK`.
//!
//! Measured: `joiners` more connections, each with a token that holds a key of its
//! own (so that detection runs: a waiter without token or session holds nothing and is
//! never searched), send `LOCK.ACQUIRE key ttl TOKEN j BLOCK 0` (to the one key, or to
//! the first key of chain `j mod chains`), and the server's event-loop CPU is counted
//! from the first send until `INFO fencelock` shows them all queued (polled every 2
//! ms), less the idle server's share pro rata of the wall time; beside it `INFO
//! commandstats`' time of `lock.acquire` over the same span (inside the command only:
//! the enqueue, detection included, without reading, parsing and the client's events).
//! Then, outside the measurement, `CLIENT UNBLOCK` ends every one of those waits (each
//! answered nil, checked) and the queues are as before. `rounds` rounds a measurement,
//! detection on and off in alternating order in each repetition.

use std::io::{self, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use testkit::resp::{encode, push_decimal, Conn, Reply};

use crate::measure::curves::crowd::{self, Crowd};
use crate::measure::curves::{
    self, feasible_waiters, idle_share, pipelined, raise_open_files, start_server, token, Expect,
    FD_MARGIN,
};
use crate::measure::server::{self, command_stats, info_field, Server};
use crate::results::acquireall::{Shape, WaitCost, WaitShape};
use crate::results::Workload;

const LEASE: &[u8] = curves::LEASE;
const LEASE_MS: u64 = 600_000;
/// Keys per chain (the owners a wait for a chain's first key reaches).
const CHAIN: u64 = 10;
/// Waiters queued on each key of a chain.
const PER_KEY: u64 = 10;
/// Connections added between two checks that the server has queued them all: fewer
/// than the listen backlog (as the waiters curve does).
const BATCH: usize = 400;
const POLL: Duration = Duration::from_millis(2);
/// Lets the server finish what came before a measurement.
const SETTLE: Duration = Duration::from_millis(10);

const QUEUE: &[u8] = b"wait:queue";
const HOLDER: &[u8; 8] = b"holder--";
const WAITER: &[u8; 8] = b"waiter--";
const JOINER: &[u8; 8] = b"joiner--";

struct Plan {
    waiters: u64,
    joiners: usize,
    rounds: u64,
    idle: Duration,
}

impl Plan {
    fn new(smoke: bool) -> Self {
        if smoke {
            Self {
                waiters: 1_000,
                joiners: 100,
                rounds: 2,
                idle: Duration::from_millis(60),
            }
        } else {
            Self {
                waiters: 10_000,
                joiners: 1_000,
                rounds: 5,
                idle: Duration::from_millis(400),
            }
        }
    }
}

fn name(prefix: &[u8], i: u64) -> Vec<u8> {
    let mut name = prefix.to_vec();
    push_decimal(&mut name, i);
    name
}

/// The key a waiter's (or a joiner's) token holds besides.
fn own_key(prefix: &[u8; 8], i: u64) -> Vec<u8> {
    let mut key = b"wait:own:".to_vec();
    key.extend_from_slice(prefix);
    push_decimal(&mut key, i);
    key
}

fn chain_key(chain: u64, link: u64) -> Vec<u8> {
    name(b"wait:chain:", chain * CHAIN + link)
}

fn chain_session(chain: u64, link: u64) -> Vec<u8> {
    name(b"chain-session-", chain * CHAIN + link)
}

/// `fencelock_waiters` of `INFO fencelock`: waits queued on the server.
fn waiting(admin: &mut Conn) -> io::Result<u64> {
    info_field(admin, "fencelock", "fencelock_waiters")?
        .parse()
        .map_err(|e| io::Error::other(format!("fencelock_waiters: {e}")))
}

/// Polls until `count` waits are queued.
fn wait_for_waiters(admin: &mut Conn, count: u64) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = waiting(admin)?;
        if now == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "{now} waits queued after 30 s, {count} expected (a DEADLOCK refusal?)"
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// A connection whose acquire waits, once a round, and is unblocked again.
struct Joiner {
    stream: TcpStream,
    inbox: Vec<u8>,
    /// Its `CLIENT ID`, for `CLIENT UNBLOCK`.
    id: Vec<u8>,
    /// The command it sends each round.
    acquire: Vec<u8>,
}

/// One shape built on its server: the waiters queued, the joiners connected.
struct Graph {
    server: Server,
    admin: Conn,
    /// Kept open: the queued waiters.
    _waiters: Crowd,
    joiners: Vec<Joiner>,
    queued: u64,
    keys: u64,
    reach: u64,
}

/// Holds each `(key, token or session)` on `conn`, pipelined.
fn hold(conn: &mut Conn, holdings: &[(Vec<u8>, Vec<u8>, bool)]) -> io::Result<()> {
    pipelined(conn, holdings.len() as u64, |i, out, expect| {
        let (key, owner, session) = &holdings[i as usize];
        let option: &[u8] = if *session { b"SESSION" } else { b"TOKEN" };
        encode(out, &[b"LOCK.ACQUIRE", key, LEASE, option, owner]);
        expect.push(Expect::Grant);
    })
}

/// Queues each wait (its `LOCK.ACQUIRE … BLOCK 0`) on a connection of its own.
fn queue(port: u16, admin: &mut Conn, waits: &[Vec<u8>]) -> io::Result<Crowd> {
    let mut crowd = Crowd::new()?;
    let base = waiting(admin)?;
    for (b, batch) in waits.chunks(BATCH).enumerate() {
        for wait in batch {
            crowd.join(port, wait)?;
        }
        wait_for_waiters(admin, base + (b * BATCH + batch.len()) as u64)?;
    }
    Ok(crowd)
}

fn blocking_acquire(key: &[u8], option: &[u8], owner: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(
        &mut out,
        &[b"LOCK.ACQUIRE", key, LEASE, option, owner, b"BLOCK", b"0"],
    );
    out
}

fn build(shape: Shape, plan: &Plan, waiters: u64, pinned: bool, dir: &Path) -> io::Result<Graph> {
    let clients = waiters + plan.joiners as u64 + 64;
    let server = start_server(pinned, clients, dir)?;
    let port = server.port;
    let mut admin = server::connect(&server)?;
    let mut setup = server::connect(&server)?;
    // (key, owner, is a session) held before anyone waits; the waits, each its command.
    let mut holdings: Vec<(Vec<u8>, Vec<u8>, bool)> = Vec::new();
    let mut waits: Vec<Vec<u8>> = Vec::new();
    let ordinary = |holdings: &mut Vec<_>, waits: &mut Vec<_>, key: &[u8]| {
        let i = waits.len() as u64;
        let mine = token(WAITER, i).to_vec();
        holdings.push((own_key(WAITER, i), mine.clone(), false));
        waits.push(blocking_acquire(key, b"TOKEN", &mine));
    };
    let (targets, keys, reach): (Vec<Vec<u8>>, u64, u64) = match shape {
        Shape::OneKey => {
            holdings.push((QUEUE.to_vec(), token(HOLDER, 0).to_vec(), false));
            for _ in 0..waiters {
                ordinary(&mut holdings, &mut waits, QUEUE);
            }
            (vec![QUEUE.to_vec()], 1, 1)
        }
        Shape::Chains => {
            let chains = (waiters / (CHAIN * PER_KEY)).max(1);
            for c in 0..chains {
                for l in 0..CHAIN {
                    holdings.push((chain_key(c, l), chain_session(c, l), true));
                }
            }
            // Each holder but a chain's last first in the next key's queue, then the
            // ordinary waiters, `PER_KEY` waits on every key.
            for c in 0..chains {
                for l in 1..CHAIN {
                    waits.push(blocking_acquire(
                        &chain_key(c, l),
                        b"SESSION",
                        &chain_session(c, l - 1),
                    ));
                }
            }
            for c in 0..chains {
                for l in 0..CHAIN {
                    let others = if l == 0 { PER_KEY } else { PER_KEY - 1 };
                    for _ in 0..others {
                        ordinary(&mut holdings, &mut waits, &chain_key(c, l));
                    }
                }
            }
            let heads = (0..chains).map(|c| chain_key(c, 0)).collect();
            (heads, chains * CHAIN, CHAIN)
        }
    };
    let joiner_tokens: Vec<Vec<u8>> = (0..plan.joiners as u64)
        .map(|k| token(JOINER, k).to_vec())
        .collect();
    for (k, mine) in joiner_tokens.iter().enumerate() {
        holdings.push((own_key(JOINER, k as u64), mine.clone(), false));
    }
    hold(&mut setup, &holdings)?;
    let queued_waiters = queue(port, &mut admin, &waits)?;
    let queued = waits.len() as u64;
    if shape == Shape::Chains {
        // The last holder of chain 0 asking for its first key closes a cycle only
        // through every holder of the chain: detection must see it.
        let mut probe = server::connect(&server)?;
        probe.set_read_timeout(Duration::from_secs(10))?;
        let reply = probe.call(&[
            b"LOCK.ACQUIRE",
            &chain_key(0, 0),
            LEASE,
            b"SESSION",
            &chain_session(0, CHAIN - 1),
            b"BLOCK",
            b"0",
        ])?;
        if !matches!(&reply, Reply::Error(e) if e.starts_with("DEADLOCK")) {
            return Err(io::Error::other(format!(
                "a wait closing a chain of {CHAIN} was answered {reply:?}, not DEADLOCK"
            )));
        }
    }
    let joiners = joiner_tokens
        .iter()
        .enumerate()
        .map(|(k, mine)| {
            let mut stream = crowd::connect(port, k)?;
            let mut out = Vec::new();
            encode(&mut out, &[b"CLIENT", b"ID"]);
            stream.write_all(&out)?;
            let mut inbox = Vec::new();
            let id = match crowd::read_reply(&mut stream, &mut inbox)? {
                Reply::Integer(id) => id.to_string().into_bytes(),
                other => return Err(io::Error::other(format!("CLIENT ID replied {other:?}"))),
            };
            let target = &targets[k % targets.len()];
            Ok(Joiner {
                stream,
                inbox,
                id,
                acquire: blocking_acquire(target, b"TOKEN", mine),
            })
        })
        .collect::<io::Result<Vec<_>>>()?;
    Ok(Graph {
        server,
        admin,
        _waiters: queued_waiters,
        joiners,
        queued,
        keys,
        reach,
    })
}

fn cpu(server: &Server) -> f64 {
    server::cpu_seconds(server).unwrap_or(f64::NAN)
}

impl Graph {
    /// One measurement: `rounds` rounds of every joiner's wait, detection as
    /// `detection`. µs of server CPU and of `lock.acquire`'s own time per wait.
    fn measure(&mut self, detection: bool, rounds: u64, idle: f64) -> io::Result<(f64, f64)> {
        let value: &[u8] = if detection { b"yes" } else { b"no" };
        self.admin
            .call_ok(&[b"CONFIG", b"SET", b"fencelock.deadlock-detection", value])?;
        let joins = self.joiners.len() as u64;
        let (mut busy, mut command_us) = (0.0, 0.0);
        for _ in 0..rounds {
            std::thread::sleep(SETTLE);
            let (usec_before, calls_before) = command_stats(&mut self.admin, "lock.acquire")?;
            let (before, started) = (cpu(&self.server), Instant::now());
            for joiner in &mut self.joiners {
                joiner.stream.write_all(&joiner.acquire)?;
            }
            wait_for_waiters(&mut self.admin, self.queued + joins)?;
            let wall = started.elapsed().as_secs_f64();
            busy += cpu(&self.server) - before - idle * wall;
            let (usec_after, calls_after) = command_stats(&mut self.admin, "lock.acquire")?;
            if calls_after - calls_before != joins as f64 {
                return Err(io::Error::other(format!(
                    "INFO commandstats counted {} lock.acquire calls, {joins} were sent",
                    calls_after - calls_before
                )));
            }
            command_us += usec_after - usec_before;
            self.unblock()?;
        }
        let waits = (joins * rounds) as f64;
        Ok((busy * 1e6 / waits, command_us / waits))
    }

    /// Ends every joiner's wait with `CLIENT UNBLOCK` (nil, as a timeout answers) and
    /// waits until only the built queues are left.
    fn unblock(&mut self) -> io::Result<()> {
        let ids: Vec<&[u8]> = self.joiners.iter().map(|j| j.id.as_slice()).collect();
        pipelined(&mut self.admin, ids.len() as u64, |i, out, expect| {
            encode(out, &[b"CLIENT", b"UNBLOCK", ids[i as usize]]);
            expect.push(Expect::One);
        })?;
        for joiner in &mut self.joiners {
            let reply = crowd::read_reply(&mut joiner.stream, &mut joiner.inbox)?;
            if !reply.is_nil() {
                return Err(io::Error::other(format!(
                    "an unblocked waiter was answered {reply:?}"
                )));
            }
        }
        wait_for_waiters(&mut self.admin, self.queued)
    }
}

fn measure_shape(
    shape: Shape,
    plan: &Plan,
    waiters: u64,
    pinned: bool,
    dir: &Path,
    repetitions: usize,
) -> io::Result<WaitShape> {
    let started = Instant::now();
    let mut graph = build(shape, plan, waiters, pinned, dir)?;
    eprintln!(
        "  {}: {} waiters on {} keys, built in {:.1} s",
        shape.label(),
        graph.queued,
        graph.keys,
        started.elapsed().as_secs_f64()
    );
    let idle = idle_share(&graph.server, plan.idle);
    let mut result = WaitShape {
        shape,
        waiters: graph.queued,
        keys: graph.keys,
        reach: graph.reach,
        on_us: Vec::new(),
        off_us: Vec::new(),
        on_command_us: Vec::new(),
        off_command_us: Vec::new(),
        idle_cpu_share: idle,
    };
    for rep in 0..repetitions {
        let mut turns = [true, false];
        if rep % 2 == 1 {
            turns.reverse();
        }
        for detection in turns {
            let (cpu_us, command_us) = graph.measure(detection, plan.rounds, idle)?;
            if detection {
                result.on_us.push(cpu_us);
                result.on_command_us.push(command_us);
            } else {
                result.off_us.push(cpu_us);
                result.off_command_us.push(command_us);
            }
        }
        eprintln!(
            "  [rep {}/{repetitions}] {}: an acquire that waits, detection on {:.2} µs / off {:.2} µs of server CPU ({:.3}×); in the command {:.2} / {:.2} µs ({:.3}×)",
            rep + 1,
            shape.label(),
            result.on_us[rep],
            result.off_us[rep],
            result.on_us[rep] / result.off_us[rep],
            result.on_command_us[rep],
            result.off_command_us[rep],
            result.on_command_us[rep] / result.off_command_us[rep],
        );
    }
    Ok(result)
}

pub fn run(pinned: bool, workload: &Workload) -> io::Result<WaitCost> {
    debug_assert_eq!(LEASE, LEASE_MS.to_string().as_bytes());
    let plan = Plan::new(workload.smoke);
    let open_files = raise_open_files(plan.waiters + plan.joiners as u64 + 2 * FD_MARGIN);
    let (sizes, capped) = feasible_waiters(&[plan.waiters], plan.joiners, open_files);
    if let Some(why) = &capped {
        eprintln!("  {why}");
    }
    let waiters = sizes.first().copied().unwrap_or(plan.waiters);
    let dir = testkit::tempfile::tempdir()?;
    let shapes = Shape::ALL
        .into_iter()
        .map(|shape| {
            measure_shape(
                shape,
                &plan,
                waiters,
                pinned,
                dir.path(),
                workload.repetitions,
            )
        })
        .collect::<io::Result<Vec<_>>>()?;
    Ok(WaitCost {
        planned_waiters: plan.waiters,
        capped,
        joiners: plan.joiners as u64,
        rounds: plan.rounds,
        lease_ms: LEASE_MS,
        shapes,
    })
}
