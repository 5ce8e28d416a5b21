//! The etcd under test: Debian's `etcd` binary (`etcd-server`, installed by `make
//! bench-peers`) as a single member on loopback, on free ports, with its data
//! directory in a temporary directory removed with it, pinned to the server's CPU when
//! the run pins (Go sizes GOMAXPROCS from the affinity mask, so it then runs on one
//! CPU, as redis-server's event loop does). Its settings are etcd's defaults: every
//! commit is fsynced before it is answered, heartbeat 100 ms, election 1000 ms (so the
//! shortest lease it grants is 2 s). Stopped with SIGTERM when dropped, SIGKILL if it
//! does not exit in time. Also the etcd client set-up every etcd measurement shares: a
//! runtime on this thread and connected clients.

use std::fs::File;
use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::Client;
use testkit::tempfile::TempDir;

use crate::measure::peers::interrupt;

/// The binary, from `PATH` unless `FENCELOCK_ETCD` names another.
fn binary() -> String {
    std::env::var("FENCELOCK_ETCD").unwrap_or_else(|_| "etcd".into())
}

pub struct Etcd {
    child: Option<Child>,
    pub url: String,
    /// What the server reports: `etcd 3.4.23`.
    pub version: String,
    temp: TempDir,
}

/// A single-threaded runtime for this thread: the load generator has one CPU, and
/// every etcd client of one process shares it.
pub fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

pub fn error(e: etcd_client::Error) -> io::Error {
    io::Error::other(format!("etcd: {e}"))
}

/// A client with its own connection (one HTTP/2 connection per `Client::connect`;
/// clones of it share that connection).
pub async fn connect(url: &str) -> io::Result<Client> {
    let mut client = Client::connect([url], None).await.map_err(error)?;
    // The channel connects lazily: one call, so that no timed request pays for it.
    client.status().await.map_err(error)?;
    Ok(client)
}

impl Etcd {
    pub fn start(cpu: Option<usize>) -> io::Result<Self> {
        let temp = testkit::tempfile::Builder::new()
            .prefix("fencelock-etcd-")
            .tempdir()?;
        let client = format!("http://127.0.0.1:{}", testkit::free_port());
        let peer = format!("http://127.0.0.1:{}", testkit::free_port());
        let log = File::create(temp.path().join("etcd.log"))?;
        let mut command = match cpu {
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.arg("-c").arg(cpu.to_string()).arg(binary());
                taskset
            }
            None => Command::new(binary()),
        };
        command
            .arg("--name")
            .arg("bench")
            .arg("--data-dir")
            .arg(temp.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("bench={peer}"))
            .arg("--initial-cluster-state")
            .arg("new")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = command.spawn().map_err(|e| {
            io::Error::other(format!(
                "cannot start {} ({e}): `make bench-peers` installs etcd-server",
                binary()
            ))
        })?;
        interrupt::register(Some(child.id()), temp.path());
        let mut etcd = Etcd {
            child: Some(child),
            url: client,
            version: String::new(),
            temp,
        };
        etcd.version = etcd.wait_ready()?;
        Ok(etcd)
    }

    /// Waits until the member answers `Status` (it has elected itself leader).
    fn wait_ready(&mut self) -> io::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let runtime = runtime()?;
        loop {
            let status = runtime.block_on(async {
                let mut client = Client::connect([&self.url], None).await?;
                client.status().await
            });
            match status {
                Ok(status) if status.leader() != 0 => {
                    return Ok(format!("etcd {}", status.version()));
                }
                _ if Instant::now() > deadline => {
                    return Err(io::Error::other(format!(
                        "etcd did not start; log:\n{}",
                        self.log()
                    )))
                }
                _ => {}
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(io::Error::other(format!(
                    "etcd exited with {status}; log:\n{}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.temp.path().join("etcd.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.temp.path()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        interrupt::unregister(self.temp.path());
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGTERM: etcd closes its WAL and backend; SIGKILL if it takes too long.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
