//! A real Redis Sentinel (`<server binary> sentinel.conf --sentinel`) on a free port in
//! its own temporary directory, killed when dropped and when the test process ends,
//! watching one primary under the service name `SERVICE`. Its own periods can be shortened (`SENTINEL DEBUG`, on every
//! server since Redis 7.0) so that a failover and the old primary's return as a replica
//! take seconds, not the tens of seconds of the defaults.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::{cmd, Connection, Value};
use tempfile::TempDir;

use crate::paths::server_binary;
use crate::ports::free_port;
use crate::process::Guarded;

/// The service every testkit Sentinel watches.
pub const SERVICE: &str = "fencelock";

pub struct Sentinel {
    pub port: u16,
    /// Killed on drop, and when the test process ends.
    _child: Guarded,
    temp: TempDir,
}

/// Starts of one Sentinel before a port that stays taken fails the test.
const BIND_ATTEMPTS: usize = 5;

/// Waits until the Sentinel answers or exits; true if it exited because its port was
/// taken (`Failed listening on port`).
fn exited_for_its_port(child: &mut Guarded, dir: &std::path::Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("sentinel.log")).unwrap_or_default();
            return log.contains("Failed listening on port")
                || log.contains("Address already in use");
        }
        let log = std::fs::read_to_string(dir.join("sentinel.log")).unwrap_or_default();
        if log.contains("Ready to accept connections") || log.contains("Sentinel ID is") {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// How quickly the Sentinels act.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// No reply for this long: the primary is down (subjectively).
    pub down_after_ms: u64,
    pub failover_timeout_ms: u64,
    /// `SENTINEL DEBUG` periods: INFO of every instance, and the hello messages (a
    /// demoted primary that still says it is a primary is reconfigured after four).
    pub info_period_ms: u64,
    pub publish_period_ms: u64,
}

impl Sentinel {
    /// Watches the primary at 127.0.0.1:`primary_port`; `quorum` Sentinels must agree it
    /// is down.
    pub fn start(primary_port: u16, quorum: usize, timing: Timing) -> Self {
        let temp = tempfile::Builder::new()
            .prefix("fencelock-sentinel-")
            .tempdir()
            .expect("create a temporary directory");
        let dir = temp.path().to_path_buf();
        let conf = dir.join("sentinel.conf");
        let mut attempt = 0;
        let (port, child) = loop {
            attempt += 1;
            let port = free_port();
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
                     sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {quorum}\n\
                     sentinel down-after-milliseconds {SERVICE} {}\n\
                     sentinel failover-timeout {SERVICE} {}\n\
                     sentinel parallel-syncs {SERVICE} 2\n",
                    timing.down_after_ms,
                    timing.failover_timeout_ms,
                    dir = dir.display()
                ),
            )
            .expect("write sentinel.conf");
            // Each attempt's log alone tells why it stopped.
            let _ = std::fs::remove_file(dir.join("sentinel.log"));
            let mut command = Command::new(server_binary());
            command
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = Guarded::spawn(&mut command).expect("start the Sentinel");
            // Its port taken between the check and the bind (see `ports`): another.
            if attempt < BIND_ATTEMPTS && exited_for_its_port(&mut child, &dir) {
                continue;
            }
            break (port, child);
        };
        let sentinel = Sentinel {
            port,
            _child: child,
            temp,
        };
        let mut con = sentinel.wait_ready();
        let _: Value = cmd("SENTINEL")
            .arg("DEBUG")
            .arg("info-period")
            .arg(timing.info_period_ms)
            .arg("publish-period")
            .arg(timing.publish_period_ms)
            // A busy test machine can stall a Sentinel's timer past its 2 s tilt
            // trigger; it then acts on nothing for 30 s by default.
            .arg("tilt-period")
            .arg(3_000)
            .query(&mut con)
            .expect("SENTINEL DEBUG");
        sentinel
    }

    fn wait_ready(&self) -> Connection {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut con) = self.try_connect() {
                if cmd("PING").query::<String>(&mut con).is_ok() {
                    return con;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinel did not start; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.temp.path().join("sentinel.log")).unwrap_or_default()
    }

    pub fn try_connect(&self) -> redis::RedisResult<Connection> {
        let con = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?
            .get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(con)
    }

    /// The port of the primary this Sentinel names now.
    pub fn primary_port(&self) -> Option<u16> {
        primary_port(&mut self.try_connect().ok()?)
    }

    /// How many replicas and how many other Sentinels it knows, healthy.
    pub fn known(&self) -> (usize, usize) {
        let Ok(mut con) = self.try_connect() else {
            return (0, 0);
        };
        let mut healthy = |what: &str| {
            cmd("SENTINEL")
                .arg(what)
                .arg(SERVICE)
                .query::<Vec<Vec<String>>>(&mut con)
                .map(|rows| {
                    rows.iter()
                        .filter(|row| {
                            row.chunks(2).any(|pair| {
                                pair[0] == "flags"
                                    && pair.get(1).is_some_and(|flags| {
                                        !flags.contains("down") && !flags.contains("disconnected")
                                    })
                            })
                        })
                        .count()
                })
                .unwrap_or(0)
        };
        (healthy("REPLICAS"), healthy("SENTINELS"))
    }
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME` of `SERVICE` on a Sentinel connection.
pub fn primary_port(con: &mut Connection) -> Option<u16> {
    let address: Option<(String, String)> = cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(SERVICE)
        .query(con)
        .ok()?;
    address?.1.parse().ok()
}
