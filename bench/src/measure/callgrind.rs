//! A second server under test, run under `valgrind --tool=callgrind`, for the profile
//! scenario: instructions executed by the whole server (every thread) and calls into
//! the allocator between a `callgrind_control --zero` and a `--dump`. Counts, unlike
//! times, do not depend on what else the machine is doing, and this machine has no
//! hardware counters for `perf stat` (a VM: `perf stat -e instructions` reports
//! `<not supported>`).
//!
//! Started here rather than through `testkit`, because the profiler wraps the server
//! binary; the server gets the same arguments and modules (fencelock and the floor)
//! the benchmark's own server gets.

use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::resp::Conn;
use testkit::tempfile::TempDir;

/// The allocator's entry points, as callgrind names them: jemalloc's with the `je_`
/// prefix (Redis 8 calls the `…_with_usize` ones), jemalloc's or libc's plain names
/// (Debian's Redis links libjemalloc without a prefix; Valkey's binary uses libc).
/// Only entry points, so an allocation that goes through `zmalloc` or
/// `RedisModule_Alloc` first counts once.
const ALLOCATOR_ENTRIES: &[&str] = &[
    "je_malloc",
    "je_calloc",
    "je_realloc",
    "je_malloc_with_usize",
    "je_calloc_with_usize",
    "je_realloc_with_usize",
    "je_mallocx",
    "je_rallocx",
    "malloc",
    "calloc",
    "realloc",
];

pub struct Callgrind {
    child: Child,
    pub port: u16,
    dir: TempDir,
}

/// What the server did between `zero` and `dump`.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub instructions: u64,
    pub allocations: u64,
}

fn run_quietly(program: &str, args: &[&str]) -> io::Result<bool> {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|status| status.success())
}

impl Callgrind {
    /// `Ok(None)` where valgrind is not installed (CI, most laptops). Each of `modules`
    /// is loaded, in order.
    pub fn start(binary: &str, modules: &[PathBuf]) -> io::Result<Option<Self>> {
        if !run_quietly("valgrind", &["--version"]).unwrap_or(false)
            || !run_quietly("callgrind_control", &["--version"]).unwrap_or(false)
        {
            return Ok(None);
        }
        let port = testkit::free_port();
        let dir = testkit::tempfile::Builder::new()
            .prefix("fencelock-callgrind-")
            .tempdir()?;
        let mut command = Command::new("valgrind");
        command
            .args([
                "--tool=callgrind",
                "--dump-instr=no",
                // Full names on every line: the dump is parsed without a name table.
                "--compress-strings=no",
                "--compress-pos=no",
            ])
            .arg(format!(
                "--callgrind-out-file={}",
                dir.path().join("cg.out").display()
            ))
            .arg(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir.path())
            .args(["--save", "", "--appendonly", "no"]);
        for module in modules {
            command.arg("--loadmodule").arg(module);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut profiled = Self { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Conn::connect(port)
            .and_then(|mut conn| conn.call_ok(&[b"PING"]))
            .is_err()
        {
            if Instant::now() > deadline || profiled.child.try_wait()?.is_some() {
                return Err(io::Error::other(
                    "redis-server under callgrind did not start",
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Some(profiled))
    }

    fn control(&self, option: &str) -> io::Result<()> {
        let pid = self.child.id().to_string();
        if run_quietly("callgrind_control", &[option, &pid])? {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "callgrind_control {option} failed"
            )))
        }
    }

    /// Starts counting afresh.
    pub fn zero(&self) -> io::Result<()> {
        self.control("--zero")
    }

    /// Writes the counts since `zero` and reads them back.
    pub fn dump(&self) -> io::Result<Counts> {
        let before = self.dumps()?;
        self.control("--dump")?;
        let file = self
            .dumps()?
            .into_iter()
            .find(|path| !before.contains(path))
            .ok_or_else(|| io::Error::other("callgrind wrote no dump"))?;
        let counts = parse(&std::fs::read_to_string(&file)?);
        std::fs::remove_file(file)?;
        counts
    }

    fn dumps(&self) -> io::Result<Vec<PathBuf>> {
        std::fs::read_dir(self.dir.path())?
            .map(|entry| entry.map(|e| e.path()))
            .filter(|path| {
                path.as_ref().map_or(true, |p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("cg.out"))
                })
            })
            .collect()
    }
}

/// The `totals:` line, and the `calls=` lines under a `cfn=` naming an allocator
/// entry point (the format: `cfn=name`, then `calls=count target`, then a cost line).
fn parse(dump: &str) -> io::Result<Counts> {
    let mut instructions = None;
    let mut allocations = 0;
    let mut callee_is_allocator = false;
    for line in dump.lines() {
        if let Some(total) = line.strip_prefix("totals:") {
            instructions = total.split_whitespace().next().and_then(|n| n.parse().ok());
        } else if let Some(name) = line.strip_prefix("cfn=") {
            callee_is_allocator = ALLOCATOR_ENTRIES.contains(&name.trim());
        } else if let Some(calls) = line.strip_prefix("calls=") {
            if callee_is_allocator {
                allocations += calls
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            callee_is_allocator = false;
        }
    }
    Ok(Counts {
        instructions: instructions
            .ok_or_else(|| io::Error::other("callgrind dump without totals"))?,
        allocations,
    })
}

impl Drop for Callgrind {
    fn drop(&mut self) {
        // SHUTDOWN NOSAVE closes the connection without a reply.
        if let Ok(mut conn) = Conn::connect(self.port) {
            let _ = conn.call(&[b"SHUTDOWN", b"NOSAVE"]);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
