//! Bytes per blocked observer: the `used_memory` delta over `n` connections each
//! blocked in `LOCK.OBSERVE key fence value BLOCK 0` on one held key, beside `n`
//! connections each subscribed to one channel (the hand-rolled way's watchers) and `n`
//! idle connections (each sent one `PING`: what of the others is their connection's).
//! Each reading is taken on an idle connection once the figure is stable, after the
//! clients' buffers have had time to shrink (`settle_s`), and the clients are gone
//! again before the next. The three alternate in each repetition.

use std::io;
use std::time::Duration;

use super::audience::{self, Known, KEY, TOKEN};
use crate::measure::curves::waiters::idle_clients;
use crate::measure::curves::{connected_clients, wait_for_clients, LEASE};
use crate::measure::lua::leader_value;
use crate::measure::memory::{per_lock, settled_memory};
use crate::measure::server::{self, flush, Server};
use crate::results::election::ObserverMemory;

#[derive(Clone, Copy)]
enum Watcher {
    Idle,
    Observer,
    Subscriber,
}

pub fn run(
    server: &Server,
    counts: &[u64],
    settle_s: u64,
    repetitions: usize,
) -> io::Result<Vec<ObserverMemory>> {
    let mut admin = server::connect(server)?;
    let settle = Duration::from_secs(settle_s);
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
                flush(&mut admin)?;
                let value = leader_value(0);
                let reply = admin.call_ok(&[
                    b"LOCK.ACQUIRE",
                    KEY,
                    LEASE,
                    b"TOKEN",
                    TOKEN,
                    b"VALUE",
                    value.as_bytes(),
                ])?;
                let (_, fence) = reply
                    .grant()
                    .ok_or_else(|| io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}")))?;
                let known = Known {
                    fence,
                    value: value.as_bytes().to_vec(),
                };
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
    Ok(results)
}
