//! Bytes per blocked observer: the `used_memory` delta over `n` connections each
//! blocked in `LOCK.OBSERVE key fence value BLOCK 0` on one held key, beside `n`
//! connections each subscribed to one channel (the hand-rolled way's watchers) and `n`
//! idle connections (each sent one `PING`: what of the others is their connection's).
//! Each reading is taken on an idle connection once the figure is stable, after the
//! clients' buffers have had time to shrink (`settle_s`), and the clients are gone
//! again before the next. The three alternate in each repetition.
//!
//! A server lets go of a blocked client's memory slowly: after 8,000 observers (or
//! `LOCK.ACQUIRE … BLOCK` waiters) disconnect, Redis 7.0 keeps some 34 KB of each
//! and frees it at about 9 MB/s, over half a minute (idle connections: at once), which a
//! later turn would count as its own bytes going (negative figures). So every turn
//! starts once `used_memory` is back at what the server used before the first
//! (`drained`), and the longest such wait is reported.

use std::io;
use std::time::{Duration, Instant};

use testkit::resp::Conn;

use super::audience::{self, Known};
use crate::measure::curves::waiters::idle_clients;
use crate::measure::curves::{connected_clients, wait_for_clients};
use crate::measure::memory::{per_lock, settled_memory, used_memory};
use crate::measure::server::{self, flush, Server};
use crate::results::election::ObserverMemory;

#[derive(Clone, Copy)]
enum Watcher {
    Idle,
    Observer,
    Subscriber,
}

/// Bytes per connection above the first baseline a turn may start at: above what
/// stays for good once 1,000 blocked clients have gone (some 170 B each for waiters,
/// 270 B for observers: tables that keep the size they grew to), far below the ~34 KB
/// that drains.
const DRAINED_PER_CONNECTION: i64 = 512;
/// Longest wait for the server to be back at its baseline.
const DRAIN_PATIENCE: Duration = Duration::from_secs(120);

/// The leader key held with a value on an emptied server; what observers know of it.
fn hold(admin: &mut Conn) -> io::Result<Known> {
    flush(admin)?;
    audience::lead(admin)
}

/// Waits until `used_memory` is back within `DRAINED_PER_CONNECTION × n` of
/// `baseline`; the seconds it took (the patience, if it never was).
fn drained(admin: &mut Conn, baseline: i64, n: u64) -> io::Result<f64> {
    let started = Instant::now();
    let ceiling = baseline + DRAINED_PER_CONNECTION * n as i64;
    while used_memory(admin)? > ceiling {
        if started.elapsed() > DRAIN_PATIENCE {
            eprintln!(
                "    used_memory not back within {DRAINED_PER_CONNECTION} B a connection of its baseline after {} s",
                DRAIN_PATIENCE.as_secs()
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(started.elapsed().as_secs_f64())
}

/// The figures at each count, and the longest wait for the server to drain, s.
pub fn run(
    server: &Server,
    counts: &[u64],
    settle_s: u64,
    repetitions: usize,
) -> io::Result<(Vec<ObserverMemory>, f64)> {
    let mut admin = server::connect(server)?;
    let settle = Duration::from_secs(settle_s);
    hold(&mut admin)?;
    let baseline = settled_memory(&mut admin)?;
    let mut longest_drain: f64 = 0.0;
    let mut results = Vec::new();
    for &n in counts {
        let mut result = ObserverMemory {
            observers: n,
            idle_connection: Vec::new(),
            observer: Vec::new(),
            subscriber: Vec::new(),
        };
        for rep in 0..repetitions {
            let mut turns = [Watcher::Idle, Watcher::Observer, Watcher::Subscriber];
            if rep % 2 == 1 {
                turns.reverse();
            }
            for watcher in turns {
                // The same keyspace for all three: the leader key, held with a value.
                let known = hold(&mut admin)?;
                longest_drain = longest_drain.max(drained(&mut admin, baseline, n)?);
                let clients = connected_clients(&mut admin)?;
                let before = settled_memory(&mut admin)?;
                let crowd = match watcher {
                    Watcher::Idle => idle_clients(server.port, n)?,
                    Watcher::Observer => audience::observers(server.port, &mut admin, n, &known)?,
                    Watcher::Subscriber => audience::subscribers(server.port, n, false)?,
                };
                std::thread::sleep(settle);
                let after = settled_memory(&mut admin)?;
                drop(crowd);
                wait_for_clients(&mut admin, clients)?;
                let bytes = per_lock(before, after, n);
                let (what, into) = match watcher {
                    Watcher::Idle => ("idle connection", &mut result.idle_connection),
                    Watcher::Observer => ("blocked observer", &mut result.observer),
                    Watcher::Subscriber => ("subscriber", &mut result.subscriber),
                };
                into.push(bytes);
                eprintln!(
                    "  [rep {}/{repetitions}] {n} of them: {bytes:.0} B per {what} (its connection included)",
                    rep + 1
                );
            }
        }
        results.push(result);
    }
    flush(&mut admin)?;
    Ok((results, longest_drain))
}
