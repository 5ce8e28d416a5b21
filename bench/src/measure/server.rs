//! The redis-server under test, launched by `testkit` (module loaded, persistence off,
//! own port and temporary directory, `SHUTDOWN NOSAVE` on drop so a server run under a
//! profiler writes its profile), with the floor module (`bench/floor`) loaded beside
//! fencelock for the floor rows. Nothing reads its replication stream (no replica, no
//! AOF): the setting the floor's verbatim propagation is only right in. This file adds what only the benchmark needs: the
//! CPU placement of server and load generator, the server's on-CPU time, and the small
//! admin calls the scenarios share (flush, INFO fields, script loading).

use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use testkit::resp::Conn;
pub use testkit::Server;

/// CPU the server runs on when pinning; the load generator gets the next one.
pub const SERVER_CPU: usize = 0;
const CLIENT_CPU: usize = 1;

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

/// The modules the server loads, fencelock's first, then the floor module. Checked
/// first: a missing build is the usual mistake and deserves a plain message (testkit
/// refuses a stale one).
pub fn modules() -> io::Result<[PathBuf; 2]> {
    let modules = [testkit::module_path(), testkit::floor_module_path()];
    if let Some(missing) = modules.iter().find(|module| !module.exists()) {
        return Err(io::Error::other(format!(
            "{} not found: run `make build` first",
            missing.display()
        )));
    }
    Ok(modules)
}

/// Starts the server with both modules, pinned to `SERVER_CPU` when `pinned`.
pub fn start(pinned: bool) -> io::Result<Server> {
    start_with(pinned, testkit::Options::default())
}

/// `start` with more server and module arguments (the cost curves' own server).
pub fn start_with(pinned: bool, options: testkit::Options) -> io::Result<Server> {
    let [module, floor] = modules()?;
    let mut args = vec!["loadmodule".into(), floor.display().to_string()];
    args.extend(options.args.iter().cloned());
    Ok(Server::with_options(testkit::Options {
        module: options.module.clone().or(Some(module)),
        args,
        cpu: pinned.then_some(SERVER_CPU),
        graceful_stop: true,
        ..options
    }))
}

pub fn connect(server: &Server) -> io::Result<Conn> {
    Conn::connect(server.port)
}

/// CPU time the server's main (event-loop) thread has used so far, from
/// `/proc/<pid>/schedstat`; `None` where that is not available.
pub fn cpu_seconds(server: &Server) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{}/schedstat", server.pid()?)).ok()?;
    let nanos: f64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(nanos / 1e9)
}

/// Empties every database synchronously.
pub fn flush(conn: &mut Conn) -> io::Result<()> {
    conn.call_ok(&[b"FLUSHALL", b"SYNC"]).map(drop)
}

/// One `field:value` line of `INFO section`.
pub fn info_field(conn: &mut Conn, section: &str, field: &str) -> io::Result<String> {
    let reply = conn.call_ok(&[b"INFO", section.as_bytes()])?;
    let text = String::from_utf8_lossy(reply.bulk().unwrap_or_default()).into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|value| value.trim().to_string())
        .ok_or_else(|| io::Error::other(format!("INFO {section} has no {field}")))
}

/// `INFO commandstats`' total µs and calls of `command` so far (zero when never
/// called).
pub fn command_stats(admin: &mut Conn, command: &str) -> io::Result<(f64, f64)> {
    let Ok(line) = info_field(admin, "commandstats", &format!("cmdstat_{command}")) else {
        return Ok((0.0, 0.0));
    };
    let value = |name: &str| -> io::Result<f64> {
        line.split(',')
            .find_map(|part| part.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::other(format!("cmdstat_{command} has no {name}: {line}")))
    };
    Ok((value("usec")?, value("calls")?))
}

/// Loads a Lua script and returns its SHA1.
pub fn load_script(conn: &mut Conn, source: &str) -> io::Result<Vec<u8>> {
    let reply = conn.call_ok(&[b"SCRIPT", b"LOAD", source.as_bytes()])?;
    reply
        .bulk()
        .map(<[u8]>::to_vec)
        .ok_or_else(|| io::Error::other(format!("SCRIPT LOAD replied {reply:?}")))
}
