//! The redis-server under test: started with the fencelock module loaded and
//! persistence off, on a free loopback port in its own directory, pinned to one CPU
//! when the machine has two or more (the load generator takes another), and killed
//! when dropped. Also the small admin calls the scenarios share (flush, INFO fields,
//! script loading).

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::resp::{Conn, Reply};

/// CPU the server runs on when pinning; the load generator gets the next one.
const SERVER_CPU: usize = 0;
const CLIENT_CPU: usize = 1;

pub fn server_binary() -> String {
    std::env::var("FENCELOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

pub fn module_path() -> PathBuf {
    std::env::var_os("FENCELOCK_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/libfencelock.so")
        })
}

/// Whether to pin server and load generator to separate CPUs: needs `taskset` and two
/// CPUs. Returns the human description recorded in the report.
pub fn pinning_plan(requested: bool) -> Option<String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let has_taskset = Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    (requested && cpus >= 2 && has_taskset).then(|| {
        format!("redis-server pinned to CPU {SERVER_CPU}, load generator (all threads and client processes) to CPU {CLIENT_CPU}")
    })
}

/// Pins this process (and every thread and child it creates later) to the client CPU.
pub fn pin_self() -> io::Result<()> {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", &CLIENT_CPU.to_string()])
        .arg(std::process::id().to_string())
        .stdout(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("taskset exited with {status}")))
    }
}

pub struct Server {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Server {
    pub fn start(pinned: bool) -> io::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::temp_dir().join(format!("fencelock-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let module = module_path();
        if !module.exists() {
            return Err(io::Error::other(format!(
                "{} not found: run `cargo build --release` first",
                module.display()
            )));
        }
        let mut command = if pinned {
            let mut taskset = Command::new("taskset");
            taskset
                .args(["-c", &SERVER_CPU.to_string()])
                .arg(server_binary());
            taskset
        } else {
            Command::new(server_binary())
        };
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .args(["--save", "", "--appendonly", "no"])
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .arg("--loadmodule")
            .arg(&module)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command
            .spawn()
            .map_err(|e| io::Error::other(format!("cannot start {}: {e}", server_binary())))?;
        let mut server = Self {
            port,
            dir,
            child: Some(child),
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut conn) = Conn::connect(self.port) {
                if conn.call(&[b"PING"]).is_ok() {
                    return Ok(());
                }
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(io::Error::other(format!(
                    "redis-server exited with {status}; log:\n{}",
                    self.log()
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "redis-server did not answer PING; log:\n{}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    pub fn connect(&self) -> io::Result<Conn> {
        Conn::connect(self.port)
    }

    /// CPU time the server's main (event-loop) thread has used so far, from
    /// `/proc/<pid>/schedstat`; `None` where that is not available.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let pid = self.child.as_ref()?.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
        let nanos: f64 = stat.split_whitespace().next()?.parse().ok()?;
        Some(nanos / 1e9)
    }
}

impl Drop for Server {
    /// `SHUTDOWN NOSAVE` first, so a server run under a profiler (valgrind via
    /// `FENCELOCK_REDIS_SERVER`) exits normally and writes its profile; killed if it
    /// has not exited within a few seconds.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(mut conn) = Conn::connect(self.port) {
                let _ = conn.send(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n");
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Empties every database synchronously.
pub fn flush(conn: &mut Conn) -> io::Result<()> {
    conn.call_ok(&[b"FLUSHALL", b"SYNC"]).map(drop)
}

/// One `field:value` line of `INFO section`.
pub fn info_field(conn: &mut Conn, section: &str, field: &str) -> io::Result<String> {
    let reply = conn.call_ok(&[b"INFO", section.as_bytes()])?;
    let text = reply
        .bulk()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .ok_or_else(|| io::Error::other("INFO did not return text"))?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|value| value.trim().to_string())
        .ok_or_else(|| io::Error::other(format!("INFO {section} has no {field}")))
}

/// Loads a Lua script and returns its SHA1.
pub fn load_script(conn: &mut Conn, source: &str) -> io::Result<String> {
    match conn.call_ok(&[b"SCRIPT", b"LOAD", source.as_bytes()])? {
        Reply::Bulk(sha) => Ok(String::from_utf8_lossy(&sha).into_owned()),
        other => Err(io::Error::other(format!("SCRIPT LOAD replied {other:?}"))),
    }
}
