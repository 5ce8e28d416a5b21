//! Row 1 of the etcd side by side: lock cycles, acquire with a lease and release, on
//! keys no other cycle uses (no waiting), for a fixed time, every cycle's latency
//! (acquire sent to release answered) recorded.
//!
//! fencelock: one connection and one thread per client, `LOCK.ACQUIRE key ttl` then
//! `LOCK.RELEASE key token`; with `depth` > 1 each connection pipelines `depth` cycles
//! on `depth` keys: the acquires of all of them in one write, then their releases.
//!
//! etcd: one `Client` (its own HTTP/2 connection) and one lease per client, granted
//! before the timed run and revoked after it; each cycle is `Lock(name, lease)` then
//! `Unlock(key)` (etcd's lock service, the `concurrency.Mutex` pattern run inside the
//! server). gRPC has no pipelining: the nearest thing is several requests in flight on
//! one connection, as HTTP/2 streams, so `depth` > 1 runs `depth` independent cycle
//! loops per client, each on its own lock name, all over that client's connection.

use std::io;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use testkit::resp::{encode, Conn};

use crate::measure::peers::etcd::{self, connect};
use crate::stats::wait_histogram;

/// Lease of a fencelock cycle: far longer than any run, so no lease ends in one.
const TTL: &[u8] = b"30000";
/// Lease of an etcd client's cycles (seconds), revoked after the run.
const ETCD_LEASE_S: i64 = 600;

/// What one timed run did.
pub struct Cycles {
    pub cycles: u64,
    pub seconds: f64,
    /// Cycle latencies in µs.
    pub latencies: Histogram<u64>,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn merge(into: &mut Histogram<u64>, from: &Histogram<u64>) -> io::Result<()> {
    into.add(from)
        .map_err(|e| io::Error::other(format!("histogram: {e}")))
}

/// fencelock cycles on the server at `port` for `run_for`.
pub fn fencelock(port: u16, clients: usize, depth: usize, run_for: Duration) -> io::Result<Cycles> {
    let connections = (0..clients)
        .map(|_| Conn::connect(port))
        .collect::<io::Result<Vec<_>>>()?;
    let barrier = Barrier::new(clients + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = connections
            .into_iter()
            .enumerate()
            .map(|(client, conn)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    fencelock_client(conn, client, depth, Instant::now() + run_for)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut total = Cycles {
            cycles: 0,
            seconds: 0.0,
            latencies: wait_histogram(),
        };
        for worker in workers {
            let (cycles, latencies, end) = worker
                .join()
                .map_err(|_| io::Error::other("a cycle thread panicked"))??;
            total.cycles += cycles;
            total.seconds = total
                .seconds
                .max(end.saturating_duration_since(start).as_secs_f64());
            merge(&mut total.latencies, &latencies)?;
        }
        Ok(total)
    })
}

/// One connection's cycles until `deadline`: returns cycles, latencies and its end.
fn fencelock_client(
    mut conn: Conn,
    client: usize,
    depth: usize,
    deadline: Instant,
) -> io::Result<(u64, Histogram<u64>, Instant)> {
    let keys: Vec<Vec<u8>> = (0..depth)
        .map(|slot| format!("peers:cycle:{client}:{slot}").into_bytes())
        .collect();
    let mut tokens: Vec<Vec<u8>> = vec![Vec::new(); depth];
    let mut latencies = wait_histogram();
    let mut out = Vec::with_capacity(depth * 80);
    let mut cycles = 0;
    while Instant::now() < deadline {
        let started = Instant::now();
        out.clear();
        for key in &keys {
            encode(&mut out, &[b"LOCK.ACQUIRE", key, TTL]);
        }
        conn.send(&out)?;
        for token in tokens.iter_mut() {
            let reply = conn.read_reply()?;
            let (granted, _fence) = reply
                .grant()
                .ok_or_else(|| io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}")))?;
            token.clear();
            token.extend_from_slice(granted);
        }
        out.clear();
        for (key, token) in keys.iter().zip(&tokens) {
            encode(&mut out, &[b"LOCK.RELEASE", key, token]);
        }
        conn.send(&out)?;
        for _ in 0..depth {
            let reply = conn.read_reply()?;
            if reply.integer() != Some(1) {
                return Err(io::Error::other(format!("LOCK.RELEASE replied {reply:?}")));
            }
            latencies
                .record(micros(started.elapsed()))
                .map_err(|e| io::Error::other(format!("latency: {e}")))?;
            cycles += 1;
        }
    }
    Ok((cycles, latencies, Instant::now()))
}

/// etcd cycles for `run_for`: `clients` connections, `depth` cycle loops on each.
pub fn etcd(url: &str, clients: usize, depth: usize, run_for: Duration) -> io::Result<Cycles> {
    etcd::runtime()?.block_on(async {
        let mut connections = Vec::with_capacity(clients);
        let mut leases = Vec::with_capacity(clients);
        for _ in 0..clients {
            let mut client = connect(url).await?;
            let lease = client
                .lease_grant(ETCD_LEASE_S, None)
                .await
                .map_err(etcd::error)?;
            leases.push(lease.id());
            connections.push(client);
        }
        let start = Instant::now();
        let deadline = start + run_for;
        let mut loops = Vec::with_capacity(clients * depth);
        for (c, (client, &lease)) in connections.iter().zip(&leases).enumerate() {
            for slot in 0..depth {
                let client = client.clone();
                let name = format!("peers/cycle/{c}/{slot}");
                loops.push(tokio::spawn(etcd_loop(client, name, lease, deadline)));
            }
        }
        let mut total = Cycles {
            cycles: 0,
            seconds: 0.0,
            latencies: wait_histogram(),
        };
        let mut first_error = None;
        for handle in loops {
            match handle.await {
                Ok(Ok((cycles, latencies, end))) => {
                    total.cycles += cycles;
                    total.seconds = total
                        .seconds
                        .max(end.saturating_duration_since(start).as_secs_f64());
                    merge(&mut total.latencies, &latencies)?;
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(io::Error::other(format!("cycle task: {e}")));
                }
            }
        }
        for (client, lease) in connections.iter_mut().zip(leases) {
            client.lease_revoke(lease).await.map_err(etcd::error)?;
        }
        first_error.map_or(Ok(total), Err)
    })
}

/// One cycle loop: `Lock(name, lease)`, `Unlock(key)`, until `deadline`.
async fn etcd_loop(
    mut client: etcd_client::Client,
    name: String,
    lease: i64,
    deadline: Instant,
) -> io::Result<(u64, Histogram<u64>, Instant)> {
    let mut latencies = wait_histogram();
    let mut cycles = 0;
    while Instant::now() < deadline {
        let started = Instant::now();
        let options = etcd_client::LockOptions::new().with_lease(lease);
        let held = client
            .lock(name.as_str(), Some(options))
            .await
            .map_err(etcd::error)?;
        client.unlock(held.key()).await.map_err(etcd::error)?;
        latencies
            .record(micros(started.elapsed()))
            .map_err(|e| io::Error::other(format!("latency: {e}")))?;
        cycles += 1;
    }
    Ok((cycles, latencies, Instant::now()))
}
