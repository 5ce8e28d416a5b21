//! Test harness: starts a real `redis-server` with the built module, one per test, on a
//! free port in its own temporary directory, and kills it on drop.
//!
//! `FENCELOCK_REDIS_SERVER` picks the server binary (default `redis-server` on PATH),
//! `FENCELOCK_MODULE` the module (default `target/release/libfencelock.so`).

#![allow(dead_code)]

pub mod resp;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use redis::{cmd, Connection, Value};

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("no free port")
}

fn fresh_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "fencelock-test-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test dir");
    dir
}

/// A running redis-server with fencelock loaded.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    module_args: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// No persistence, debug commands allowed.
    pub fn start() -> Self {
        Self::with_args(&[])
    }

    /// Extra `--name value` arguments after the defaults (later ones win).
    pub fn with_args(args: &[&str]) -> Self {
        Self::with_module_args(args, &[])
    }

    /// As `with_args`, plus arguments for the module's `loadmodule` line.
    pub fn with_module_args(args: &[&str], module_args: &[&str]) -> Self {
        let mut server = Server {
            port: free_port(),
            dir: fresh_dir(),
            args: args.iter().map(|s| s.to_string()).collect(),
            module_args: module_args.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let mut command = Command::new(server_binary());
        command
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--enable-debug-command")
            .arg("yes")
            .arg("--repl-diskless-sync-delay")
            .arg("0")
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .arg("--loadmodule")
            .arg(module_path())
            .args(&self.module_args);
        for pair in self.args.chunks(2) {
            command.arg(format!("--{}", pair[0]));
            if let Some(value) = pair.get(1) {
                command.arg(value);
            }
        }
        command.stdout(Stdio::null()).stderr(Stdio::null());
        self.child = Some(command.spawn().expect("start redis-server"));
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut con) = self.try_connect() {
                let pong: redis::RedisResult<String> = cmd("PING").query(&mut con);
                if pong.is_ok() {
                    return;
                }
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("redis-server exited with {status}; log:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    pub fn connect(&self) -> Connection {
        self.try_connect().expect("connect to redis-server")
    }

    /// Is the process still running?
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGKILL: no shutdown save, no AOF flush beyond what fsync policy wrote.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Clean SHUTDOWN (saves if persistence is configured), then waits for exit.
    pub fn shutdown(&mut self) {
        if let Ok(mut con) = self.try_connect() {
            let _: redis::RedisResult<Value> = cmd("SHUTDOWN").query(&mut con);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// Starts the same server again (same port, dir and arguments).
    pub fn restart(&mut self) {
        self.launch();
    }

    /// Like `restart`, with different extra arguments.
    pub fn restart_with_args(&mut self, args: &[&str]) {
        self.args = args.iter().map(|s| s.to_string()).collect();
        self.launch();
    }

    /// The redis-server process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGSTOP: the process freezes; connections stay open and nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let status = Command::new("kill")
                .arg(signal)
                .arg(pid.to_string())
                .status()
                .expect("run kill");
            assert!(status.success(), "kill {signal} {pid}");
        }
    }

    /// Makes this server a replica of `primary` and waits until the link is up.
    pub fn replicate_from(&self, primary: &Server) {
        let mut con = self.connect();
        let _: () = cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query(&mut con)
            .expect("REPLICAOF");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let info: String = cmd("INFO")
                .arg("replication")
                .query(&mut con)
                .expect("INFO");
            if info.contains("master_link_status:up") {
                return;
            }
            assert!(Instant::now() < deadline, "replica did not sync");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `LOCK.ACQUIRE key ttl [extra…]` → `Some((token, fence))` or `None` when busy.
pub fn acquire(con: &mut Connection, key: &str, ttl: i64, extra: &[&str]) -> Option<(String, i64)> {
    cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(ttl)
        .arg(extra)
        .query(con)
        .expect("LOCK.ACQUIRE")
}

/// `LOCK.FENCE key` → the fence or `None`.
pub fn fence(con: &mut Connection, key: &str) -> Option<i64> {
    cmd("LOCK.FENCE").arg(key).query(con).expect("LOCK.FENCE")
}

/// An integer-reply command (`LOCK.RELEASE`, `LOCK.REFRESH`, `PTTL`, …).
pub fn int(con: &mut Connection, args: &[&str]) -> i64 {
    let (name, rest) = args.split_first().expect("a command");
    cmd(name).arg(rest).query(con).expect("integer reply")
}

/// Value of one field of an INFO section, e.g. `info_field(con, "fencelock", "fencelock_acquired")`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let info: String = cmd("INFO").arg(section).query(con).ok()?;
    info.lines().find_map(|line| {
        line.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// Waits until `check` holds or panics after `timeout`.
pub fn eventually(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A primary and a replica already in sync with it.
pub fn primary_and_replica() -> (Server, Server) {
    let primary = Server::start();
    let replica = Server::start();
    replica.replicate_from(&primary);
    (primary, replica)
}

/// `WAIT 1 5000` on the primary: the replica has everything written so far.
pub fn wait_replicated(primary: &mut Connection) {
    let acked: i64 = cmd("WAIT").arg(1).arg(5000).query(primary).unwrap();
    assert_eq!(acked, 1, "replica acknowledged");
}

/// `DEBUG DIGEST` of the whole dataset.
pub fn digest(con: &mut Connection) -> String {
    cmd("DEBUG").arg("DIGEST").query(con).unwrap()
}

/// `LOCK.INFO key` as field → value, or `None` when the reply is nil.
pub fn lock_info(
    con: &mut Connection,
    key: &str,
) -> Option<std::collections::HashMap<String, Value>> {
    let info: Option<Vec<Value>> = cmd("LOCK.INFO").arg(key).query(con).unwrap();
    info.map(|flat| {
        flat.chunks(2)
            .map(|pair| {
                (
                    redis::from_redis_value::<String>(pair[0].clone()).unwrap(),
                    pair[1].clone(),
                )
            })
            .collect()
    })
}
