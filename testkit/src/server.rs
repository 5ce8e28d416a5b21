//! A real `redis-server` with the built module loaded, on a free port in its own
//! temporary directory (removed with it), killed when dropped and when the test process
//! ends (`process`). One per test: tests run in parallel and never share server state.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::{cmd, Connection, Value};
use tempfile::TempDir;

use crate::paths::{module_path, server_binary};
use crate::ports::free_port;
use crate::process::spawn;

/// Starts of one server before a port that stays taken fails the test.
const BIND_ATTEMPTS: usize = 5;

/// Did the server stop because its port (or its cluster bus port) was taken? Redis and
/// Valkey log `Failed listening on port <n> (tcp|cluster), aborting.` then.
fn port_taken(log: &str) -> bool {
    log.contains("Failed listening on port") || log.contains("Address already in use")
}

/// A running redis-server with fencelock loaded.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    options: Options,
    child: Option<Child>,
    /// Has it answered once? A later launch is a restart, on the same port.
    started: bool,
    /// Removed with the server.
    _temp: TempDir,
}

/// How to start a server beyond the defaults (no persistence, debug commands allowed).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Extra `name value` pairs, passed as `--name value` after the defaults.
    pub args: Vec<String>,
    /// Arguments for the module's `loadmodule` line.
    pub module_args: Vec<String>,
    /// Another build of the module than `module_path()`.
    pub module: Option<PathBuf>,
    /// Run the server pinned to this CPU (`taskset`), as the benchmark does.
    pub cpu: Option<usize>,
    /// On drop, `SHUTDOWN NOSAVE` first (so a server under a profiler writes its
    /// profile) instead of killing at once.
    pub graceful_stop: bool,
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

    /// A node with cluster mode on, not yet in a cluster. Its bus listens on Redis's
    /// default, port + 10000, which `free_port` checks free along with the port (and a
    /// node whose bus port was taken meanwhile starts again on another pair).
    pub fn cluster_node() -> Self {
        Self::with_args(&[
            "cluster-enabled",
            "yes",
            "cluster-config-file",
            "nodes.conf",
            "cluster-node-timeout",
            "5000",
        ])
    }

    /// As `with_args`, plus arguments for the module's `loadmodule` line.
    pub fn with_module_args(args: &[&str], module_args: &[&str]) -> Self {
        Self::with_options(Options {
            args: args.iter().map(|s| s.to_string()).collect(),
            module_args: module_args.iter().map(|s| s.to_string()).collect(),
            ..Options::default()
        })
    }

    pub fn with_options(options: Options) -> Self {
        let temp = tempfile::Builder::new()
            .prefix("fencelock-")
            .tempdir()
            .expect("create a temporary directory");
        let mut server = Server {
            port: free_port(),
            dir: temp.path().to_path_buf(),
            options,
            child: None,
            started: false,
            _temp: temp,
        };
        server.launch();
        server
    }

    /// Starts the server and waits until it answers. A fresh server whose port was
    /// taken between `free_port`'s check and its own bind (another process's server,
    /// or its cluster bus port) picks another port and starts again; a restart keeps
    /// its port (replicas, proxies and Sentinels know it) and tries it a few times.
    fn launch(&mut self) {
        // A restart of a server that still runs: stop the old process first (cleanly,
        // as `shutdown`), so that it is reaped rather than left running beside the new
        // one, which could not bind its port (and a readiness check would then have
        // reached the old process).
        if self.is_alive() {
            self.shutdown_within(Duration::from_secs(20));
        }
        self.kill();
        let fresh = !self.started;
        for attempt in 1..=BIND_ATTEMPTS {
            let logged = self.log().len();
            let mut command = self.command();
            command.stdout(Stdio::null()).stderr(Stdio::null());
            self.child = Some(spawn(&mut command).expect("start redis-server"));
            match self.wait_ready() {
                Ok(()) => {
                    self.started = true;
                    return;
                }
                // This attempt's part of the log (it appends across restarts).
                Err(log)
                    if attempt < BIND_ATTEMPTS && port_taken(log.get(logged..).unwrap_or(&log)) =>
                {
                    self.kill();
                    if fresh {
                        self.port = free_port();
                    } else {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                Err(log) => panic!("redis-server exited; log:\n{log}"),
            }
        }
    }

    fn command(&self) -> Command {
        let mut command = match self.options.cpu {
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.arg("-c").arg(cpu.to_string()).arg(server_binary());
                taskset
            }
            None => Command::new(server_binary()),
        };
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
            .arg(self.options.module.clone().unwrap_or_else(module_path))
            .args(&self.options.module_args);
        for pair in self.options.args.chunks(2) {
            command.arg(format!("--{}", pair[0]));
            if let Some(value) = pair.get(1) {
                command.arg(value);
            }
        }
        command
    }

    /// Waits for PONG; the log if the process exited first.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut con) = self.try_connect() {
                let pong: redis::RedisResult<String> = cmd("PING").query(&mut con);
                if pong.is_ok() {
                    return Ok(());
                }
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(self.log());
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

    pub fn try_connect(&self) -> redis::RedisResult<Connection> {
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

    /// `shutdown`, killing the process if it has not exited within `limit`.
    fn shutdown_within(&mut self, limit: Duration) {
        if let Ok(mut con) = self.try_connect() {
            let _: redis::RedisResult<Value> = cmd("SHUTDOWN").query(&mut con);
        }
        let deadline = Instant::now() + limit;
        while self.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }

    /// Starts the same server again (same port, dir and arguments); one still running
    /// is shut down first (`shutdown`: it saves what its persistence settings save).
    pub fn restart(&mut self) {
        self.launch();
    }

    /// Like `restart`, with different extra arguments.
    pub fn restart_with_args(&mut self, args: &[&str]) {
        self.options.args = args.iter().map(|s| s.to_string()).collect();
        self.launch();
    }

    /// The redis-server process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// CPU time the server's main thread has used so far (`/proc/<pid>/schedstat`, as
    /// the benchmark's cost curves measure it). Unlike wall time, it does not grow while
    /// a busy machine keeps the server waiting for a CPU: what a command costs, timed
    /// this way, is its own work.
    pub fn cpu_time(&self) -> Duration {
        let pid = self.pid().expect("the server runs");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .expect("/proc/<pid>/schedstat");
        let ns = stat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse().ok())
            .expect("time on CPU");
        Duration::from_nanos(ns)
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
            signal_process(pid, signal);
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
                break;
            }
            assert!(Instant::now() < deadline, "replica did not sync");
            std::thread::sleep(Duration::from_millis(20));
        }
        // A link that is up may not stream commands yet (after a diskless sync the
        // primary waits for the replica's first ACK, up to a second): a probe written on
        // the primary and seen here proves the stream flows. It is deleted the same way.
        let mut on_primary = primary.connect();
        for (command, seen) in [("SET", 1), ("DEL", 0)] {
            let mut probe = cmd(command);
            probe.arg("testkit:replication-probe");
            if command == "SET" {
                probe.arg("1");
            }
            let _: Value = probe.query(&mut on_primary).expect("probe");
            loop {
                let exists: i64 = cmd("EXISTS")
                    .arg("testkit:replication-probe")
                    .query(&mut con)
                    .expect("EXISTS");
                if exists == seen {
                    break;
                }
                assert!(Instant::now() < deadline, "replica did not stream");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.options.graceful_stop {
            self.stop_gracefully();
        }
        self.kill();
    }
}

impl Server {
    /// `SHUTDOWN NOSAVE`, then up to 10 s for the process to exit by itself.
    fn stop_gracefully(&mut self) {
        if let Ok(mut con) = self.try_connect() {
            let _: redis::RedisResult<Value> = cmd("SHUTDOWN").arg("NOSAVE").query(&mut con);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Sends `signal` (`-STOP`, `-CONT`, `-9`, …) to process `pid`, which must exist.
pub fn signal_process(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}");
}
