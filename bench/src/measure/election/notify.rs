//! How long `n` observers take to hear of a change, `LOCK.OBSERVE … BLOCK` against the
//! hand-rolled way, on a server of their own (one connection per observer; two per
//! subscriber: its subscription and its `GET`, as a pub/sub client library keeps them).
//!
//! A measurement is `rounds` changes of one kind, each made by one more connection
//! (the changer) once every watcher is ready, timed from just before the change is
//! sent to each watcher holding the new state:
//!
//! - `Grant`: a leader takes the free key — `LOCK.ACQUIRE key ttl TOKEN t VALUE v`,
//!   against `SET key v NX PX ttl` and `PUBLISH channel v` in one write; the key is
//!   freed again between rounds, untimed (`LOCK.RELEASE` before the observers wait
//!   again; a `DEL` that publishes nothing).
//! - `Proclaim`: the leader changes its value — `LOCK.PROCLAIM key t v`, against the
//!   owner-checked `SET key v XX KEEPTTL` script (`lua::PROCLAIM`) and `PUBLISH` in
//!   one write.
//!
//! An observer holds the new state when its `LOCK.OBSERVE` is answered with it (each
//! then waits again with what it heard, and the next change is made once `INFO
//! fencelock` counts them all waiting); a subscriber, when the `GET` it sends on the
//! message is answered with the new value. Every answer is checked. All watchers are
//! read by one thread (one epoll set), as the waits are stamped: with many watchers
//! the later answers also wait for this thread to read the earlier ones, on both
//! sides (a subscriber's two replies, an observer's one).

use std::io;
use std::time::{Duration, Instant};

use testkit::resp::{encode, Conn, Reply};

use super::audience::{self, message, wait_for_observers, Known, CHANNEL, KEY, TOKEN};
use crate::measure::curves::{connected_clients, wait_for_clients, LEASE};
use crate::measure::lua::{leader_value, Scripts};
use crate::measure::server::{self, flush, Server};
use crate::results::election::{Change, Notify, Watch};
use crate::stats::{percentile_ms, spread, wait_histogram};

/// Lets the server finish what came before a change (the re-armed waits' replies).
const SETTLE: Duration = Duration::from_millis(2);

fn unexpected(what: &str, reply: &Reply) -> io::Error {
    io::Error::other(format!("{what} replied {reply:?}"))
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// `rounds` changes heard by `n` observers; every observer's wait of every round, µs.
fn observe_rounds(
    server: &Server,
    admin: &mut Conn,
    changer: &mut Conn,
    change: Change,
    n: u64,
    rounds: u64,
) -> io::Result<Vec<Vec<u64>>> {
    let mut known = match change {
        Change::Grant => Known::FREE,
        Change::Proclaim => audience::lead(changer)?,
    };
    let mut crowd = audience::observers(server.port, admin, n, &known)?;
    let mut all = Vec::new();
    for round in 1..=rounds {
        if round > 1 {
            if change == Change::Grant {
                let reply = changer.call(&[b"LOCK.RELEASE", KEY, TOKEN])?;
                if reply.integer() != Some(1) {
                    return Err(unexpected("LOCK.RELEASE", &reply));
                }
                known = Known::FREE;
            }
            let mut again = Vec::new();
            known.observe(&mut again);
            for member in 0..n as usize {
                crowd.send(member, &again)?;
            }
            wait_for_observers(admin, n)?;
        }
        std::thread::sleep(SETTLE);
        let value = leader_value(round);
        let mut out = Vec::new();
        match change {
            Change::Grant => encode(
                &mut out,
                &[
                    b"LOCK.ACQUIRE",
                    KEY,
                    LEASE,
                    b"TOKEN",
                    TOKEN,
                    b"VALUE",
                    value.as_bytes(),
                ],
            ),
            Change::Proclaim => encode(&mut out, &[b"LOCK.PROCLAIM", KEY, TOKEN, value.as_bytes()]),
        }
        let mut waits = Vec::with_capacity(n as usize);
        let mut heard: Option<Known> = None;
        let sent = Instant::now();
        changer.send(&out)?;
        crowd.serve(|_, _, reply| {
            let wait = micros(sent);
            let state = Known::of(&reply)
                .filter(|state| state.value == value.as_bytes())
                .ok_or_else(|| unexpected("an observer's LOCK.OBSERVE", &reply))?;
            if *heard.get_or_insert_with(|| state.clone()) != state {
                return Err(unexpected("another observer's LOCK.OBSERVE", &reply));
            }
            waits.push(wait);
            Ok((waits.len() as u64) < n)
        })?;
        let reply = changer.read_reply()?;
        let heard = heard.ok_or_else(|| io::Error::other("no observer answered"))?;
        let fine = match change {
            Change::Grant => reply.grant().is_some_and(|(_, fence)| fence == heard.fence),
            Change::Proclaim => reply.integer() == Some(1) && heard.fence == known.fence,
        };
        if !fine {
            return Err(unexpected("the change", &reply));
        }
        known = heard;
        all.push(waits);
    }
    Ok(all)
}

/// `rounds` changes heard by `n` subscribers, each `GET`ting the key on the message.
fn pubsub_rounds(
    server: &Server,
    changer: &mut Conn,
    scripts: &Scripts,
    change: Change,
    n: u64,
    rounds: u64,
) -> io::Result<Vec<Vec<u64>>> {
    let mut previous = leader_value(0);
    if change == Change::Proclaim {
        changer.call_ok(&[b"SET", KEY, previous.as_bytes(), b"PX", LEASE])?;
    }
    let mut crowd = audience::subscribers(server.port, n, true)?;
    let mut get = Vec::new();
    encode(&mut get, &[b"GET", KEY]);
    let mut all = Vec::new();
    for round in 1..=rounds {
        if change == Change::Grant && round > 1 {
            changer.call_ok(&[b"DEL", KEY])?;
        }
        std::thread::sleep(SETTLE);
        let value = leader_value(round);
        let mut out = Vec::new();
        match change {
            Change::Grant => encode(
                &mut out,
                &[b"SET", KEY, value.as_bytes(), b"NX", b"PX", LEASE],
            ),
            Change::Proclaim => encode(
                &mut out,
                &[
                    b"EVALSHA",
                    &scripts.proclaim,
                    b"1",
                    KEY,
                    previous.as_bytes(),
                    value.as_bytes(),
                ],
            ),
        }
        encode(&mut out, &[b"PUBLISH", CHANNEL, value.as_bytes()]);
        let mut waits = Vec::with_capacity(n as usize);
        let sent = Instant::now();
        changer.send(&out)?;
        crowd.serve(|crowd, member, reply| {
            if member % 2 == 0 {
                if message(&reply) != Some(value.as_bytes()) {
                    return Err(unexpected("a subscription", &reply));
                }
                crowd.send(member + 1, &get)?;
                return Ok(true);
            }
            let wait = micros(sent);
            if reply.bulk() != Some(value.as_bytes()) {
                return Err(unexpected("a subscriber's GET", &reply));
            }
            waits.push(wait);
            Ok((waits.len() as u64) < n)
        })?;
        let write = changer.read_reply()?;
        let fine = match change {
            Change::Grant => write.is_ok(),
            Change::Proclaim => write.integer() == Some(1),
        };
        if !fine {
            return Err(unexpected("the change", &write));
        }
        let published = changer.read_reply()?;
        if published.integer() != Some(n as i64) {
            return Err(unexpected("PUBLISH", &published));
        }
        previous = value;
        all.push(waits);
    }
    Ok(all)
}

/// One measurement on a flushed server, its watchers gone again after it.
fn measure(
    server: &Server,
    admin: &mut Conn,
    scripts: &Scripts,
    watch: Watch,
    change: Change,
    n: u64,
    rounds: u64,
) -> io::Result<Vec<Vec<u64>>> {
    flush(admin)?;
    let clients = connected_clients(admin)?;
    let mut changer = server::connect(server)?;
    let waits = match watch {
        Watch::Observe => observe_rounds(server, admin, &mut changer, change, n, rounds)?,
        Watch::PubSub => pubsub_rounds(server, &mut changer, scripts, change, n, rounds)?,
    };
    drop(changer);
    wait_for_clients(admin, clients)?;
    Ok(waits)
}

/// The waits of one measurement into its row: p50, p99 and max of every wait, and the
/// median over rounds of the round's longest.
fn record(row: &mut Notify, rounds: &[Vec<u64>]) -> io::Result<()> {
    let mut waits = wait_histogram();
    for &wait in rounds.iter().flatten() {
        waits
            .record(wait)
            .map_err(|e| io::Error::other(format!("wait {wait}: {e}")))?;
    }
    let longest: Vec<f64> = rounds
        .iter()
        .map(|r| r.iter().max().map_or(f64::NAN, |&us| us as f64 / 1e3))
        .collect();
    row.p50_ms.push(percentile_ms(&waits, 50.0));
    row.p99_ms.push(percentile_ms(&waits, 99.0));
    row.max_ms.push(percentile_ms(&waits, 100.0));
    row.all_heard_ms.push(spread(&longest).median);
    Ok(())
}

pub fn run(
    server: &Server,
    counts: &[u64],
    rounds: u64,
    repetitions: usize,
) -> io::Result<Vec<Notify>> {
    let mut admin = server::connect(server)?;
    let scripts = Scripts::load(&mut admin)?;
    let mut rows: Vec<Notify> = counts
        .iter()
        .flat_map(|&observers| {
            Change::ALL.into_iter().flat_map(move |change| {
                Watch::ALL.map(|watch| Notify {
                    change,
                    watch,
                    observers,
                    p50_ms: Vec::new(),
                    p99_ms: Vec::new(),
                    max_ms: Vec::new(),
                    all_heard_ms: Vec::new(),
                })
            })
        })
        .collect();
    for rep in 0..repetitions {
        for pair in rows.chunks_mut(Watch::ALL.len()) {
            let mut order: Vec<usize> = (0..pair.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for w in order {
                let row = &mut pair[w];
                let waits = measure(
                    server,
                    &mut admin,
                    &scripts,
                    row.watch,
                    row.change,
                    row.observers,
                    rounds,
                )?;
                record(row, &waits)?;
            }
            let [ours, theirs] = [&pair[0], &pair[1]];
            eprintln!(
                "  [rep {}/{repetitions}] {:>4} observers, {:<20}  {} p50 {:.3} ms p99 {:.3} ms  {} p50 {:.3} ms p99 {:.3} ms  p50 ratio {:.2}×",
                rep + 1,
                ours.observers,
                ours.change.label(),
                ours.watch.label(),
                ours.p50_ms[rep],
                ours.p99_ms[rep],
                theirs.watch.label(),
                theirs.p50_ms[rep],
                theirs.p99_ms[rep],
                theirs.p50_ms[rep] / ours.p50_ms[rep],
            );
        }
    }
    flush(&mut admin)?;
    Ok(rows)
}
