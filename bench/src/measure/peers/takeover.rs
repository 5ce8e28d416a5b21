//! Row 3 of the etcd side by side: how long a lock stays taken after its holder dies.
//! A holder process (`peer-holder`, the bench binary re-executed) takes the lock with
//! a short lease, a waiter queues behind it (`LOCK.ACQUIRE … BLOCK`; etcd's `Lock`,
//! waiting server-side), and the holder is killed with SIGKILL: no release, no
//! keepalive, its connection closes. Measured: from the kill to the waiter's grant, and
//! how far past the holder's lease end that grant came.
//!
//! The lease is the same for both: 2 s, the shortest etcd grants with its default
//! election timeout (1.5 × 1000 ms, rounded up to whole seconds; a shorter request is
//! raised to it, which the holder checks). Times cross processes as wall-clock
//! microseconds (one machine, one clock); the lease's start is taken as the moment
//! the holder sent the request that started it (`LOCK.ACQUIRE`; etcd's `LeaseGrant`),
//! so the lease end is never placed later than it was.

use std::io::{self, BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use testkit::resp::Conn;

use crate::measure::peers::etcd::{self, connect};
use crate::results::peers::TakeoverSample;

/// The holder's lease.
pub const LEASE_MS: u64 = 2_000;
/// How long the waiter is given to be queued before the holder is killed.
const QUEUED_AFTER: Duration = Duration::from_millis(100);
/// The etcd waiter's lease (seconds): granted before it queues, so longer than the
/// wait; revoked once it has the lock. (fencelock's waiter's lease starts at its grant:
/// it gets `LEASE_MS`.)
const WAITER_LEASE_S: i64 = 60;
/// The waiter's own wait limit (fencelock's BLOCK timeout).
const WAIT_LIMIT_MS: &str = "30000";

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Who holds and who waits.
pub enum Target<'a> {
    Fencelock { port: u16 },
    Etcd { url: &'a str },
}

/// The holder process, killed when dropped if still running.
struct Holder {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Holder {
    /// Starts `peer-holder` and waits for its `held <lease-start-µs>` line.
    fn start(target: &Target, key: &str) -> io::Result<(Self, u64)> {
        let mut command = Command::new(std::env::current_exe()?);
        command.arg("peer-holder");
        match target {
            Target::Fencelock { port } => command.arg("fencelock").arg(port.to_string()),
            Target::Etcd { url } => command.arg("etcd").arg(url),
        };
        let mut child = command
            .arg(key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("holder without a pipe"))?;
        let mut holder = Holder {
            child,
            stdout: BufReader::new(stdout),
        };
        let mut line = String::new();
        holder.stdout.read_line(&mut line)?;
        let lease_start = line
            .strip_prefix("held ")
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| io::Error::other(format!("holder said {line:?}")))?;
        Ok((holder, lease_start))
    }

    /// SIGKILL; returns the moment it was sent.
    fn kill(&mut self) -> io::Result<u64> {
        let at = now_us();
        self.child.kill()?;
        self.child.wait()?;
        Ok(at)
    }
}

fn sample(lease_start: u64, killed: u64, granted: u64) -> TakeoverSample {
    let ms = |from: u64, to: u64| (to as f64 - from as f64) / 1e3;
    TakeoverSample {
        kill_to_grant_ms: ms(killed, granted),
        past_lease_end_ms: ms(lease_start + LEASE_MS * 1000, granted),
    }
}

/// One holder's death and the waiter's grant on lock `key` (new for each run).
pub fn run_once(target: &Target, key: &str) -> io::Result<TakeoverSample> {
    match target {
        Target::Fencelock { port } => fencelock(target, *port, key),
        Target::Etcd { url } => etcd_once(target, url, key),
    }
}

fn fencelock(target: &Target, port: u16, key: &str) -> io::Result<TakeoverSample> {
    let mut waiter = Conn::connect(port)?;
    let (mut holder, lease_start) = Holder::start(target, key)?;
    let lease = LEASE_MS.to_string();
    let argv: [&[u8]; 5] = [
        b"LOCK.ACQUIRE",
        key.as_bytes(),
        lease.as_bytes(),
        b"BLOCK",
        WAIT_LIMIT_MS.as_bytes(),
    ];
    std::thread::scope(|scope| {
        let waiting = scope.spawn(move || {
            let reply = waiter.call(&argv)?;
            let granted = now_us();
            let token = reply
                .grant()
                .map(|(token, _)| token.to_vec())
                .ok_or_else(|| io::Error::other(format!("waiter's LOCK.ACQUIRE: {reply:?}")))?;
            waiter.call(&[b"LOCK.RELEASE", key.as_bytes(), &token])?;
            Ok::<_, io::Error>(granted)
        });
        std::thread::sleep(QUEUED_AFTER);
        let killed = holder.kill()?;
        let granted = waiting
            .join()
            .map_err(|_| io::Error::other("the waiter panicked"))??;
        Ok(sample(lease_start, killed, granted))
    })
}

fn etcd_once(target: &Target, url: &str, key: &str) -> io::Result<TakeoverSample> {
    etcd::runtime()?.block_on(async {
        let mut waiter = connect(url).await?;
        // The waiter's lease runs from before it queues, so it has to outlast the wait.
        let lease = waiter
            .lease_grant(WAITER_LEASE_S, None)
            .await
            .map_err(etcd::error)?
            .id();
        let (mut holder, lease_start) = Holder::start(target, key)?;
        let mut client = waiter.clone();
        let name = key.to_string();
        let waiting = tokio::spawn(async move {
            let options = etcd_client::LockOptions::new().with_lease(lease);
            let held = client
                .lock(name, Some(options))
                .await
                .map_err(etcd::error)?;
            let granted = now_us();
            client.unlock(held.key()).await.map_err(etcd::error)?;
            Ok::<_, io::Error>(granted)
        });
        tokio::time::sleep(QUEUED_AFTER).await;
        let killed = holder.kill()?;
        let granted = waiting
            .await
            .map_err(|e| io::Error::other(format!("waiter: {e}")))??;
        waiter.lease_revoke(lease).await.map_err(etcd::error)?;
        Ok(sample(lease_start, killed, granted))
    })
}

/// Entry point of `peer-holder fencelock <port> <key>` / `peer-holder etcd <url>
/// <name>`: takes the lock with a `LEASE_MS` lease, prints `held <µs>` (when it sent
/// the request that started the lease), then waits, connected and idle, to be killed.
pub fn main(args: &[String]) -> io::Result<()> {
    match args {
        [system, port, key] if system == "fencelock" => {
            let port = port
                .parse()
                .map_err(|_| io::Error::other(format!("bad port {port:?}")))?;
            let mut conn = Conn::connect(port)?;
            let lease = LEASE_MS.to_string();
            let sent = now_us();
            let reply = conn.call(&[b"LOCK.ACQUIRE", key.as_bytes(), lease.as_bytes()])?;
            if reply.grant().is_none() {
                return Err(io::Error::other(format!(
                    "holder's LOCK.ACQUIRE: {reply:?}"
                )));
            }
            held(sent)
        }
        [system, url, name] if system == "etcd" => {
            let runtime = etcd::runtime()?;
            let (client, sent) = runtime.block_on(async {
                let mut client = connect(url).await?;
                let sent = now_us();
                let lease = client
                    .lease_grant((LEASE_MS / 1000) as i64, None)
                    .await
                    .map_err(etcd::error)?;
                if lease.ttl() * 1000 != LEASE_MS as i64 {
                    return Err(io::Error::other(format!(
                        "etcd granted a {} s lease for {} ms",
                        lease.ttl(),
                        LEASE_MS
                    )));
                }
                let options = etcd_client::LockOptions::new().with_lease(lease.id());
                client
                    .lock(name.as_str(), Some(options))
                    .await
                    .map_err(etcd::error)?;
                Ok::<_, io::Error>((client, sent))
            })?;
            // Neither a keepalive nor an unlock: the client (and the runtime its
            // connection belongs to) stays, idle, until the kill closes the connection.
            let outcome = held(sent);
            drop((client, runtime));
            outcome
        }
        _ => Err(io::Error::other(format!(
            "bad peer-holder arguments {args:?}"
        ))),
    }
}

/// Says `held <lease-start-µs>` and waits for the kill (the parent keeps stdin open).
fn held(lease_start: u64) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "held {lease_start}")?;
    stdout.flush()?;
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    Ok(())
}
