//! Ctrl-C or SIGTERM while the etcd side by side runs. The servers it started are
//! stopped by their owners' drops on every way out of the scenario, errors included,
//! but a signal ends this process without them: their processes would outlive it (a
//! SIGTERM is sent to this process alone; ctrl-c reaches the whole process group, so
//! the servers stop by themselves, but their data directories, etcd's with a 64 MB
//! preallocated WAL, would stay behind). So each server started here is registered,
//! and the first such signal stops every registered one (SIGTERM, then SIGKILL after
//! 10 s), removes their directories and exits with 130, as a shell reports a
//! ctrl-c.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};

/// Running servers: pid and directory.
static RUNNING: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());
static WATCHING: Once = Once::new();

/// Registers a server just started (its process and its directory).
pub fn register(pid: Option<u32>, dir: &Path) {
    WATCHING.call_once(watch);
    if let Some(pid) = pid {
        let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        running.push((pid, dir.to_path_buf()));
    }
}

/// Forgets a server its owner is stopping.
pub fn unregister(dir: &Path) {
    let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
    running.retain(|(_, d)| d != dir);
}

/// A thread with its own runtime waiting for SIGINT or SIGTERM (built here, not taken
/// from `etcd`: the servers it stops, etcd among them, sit above this file).
fn watch() {
    std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let Ok(runtime) = runtime else {
            return;
        };
        runtime.block_on(async {
            let (Ok(mut interrupt), Ok(mut terminate)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            eprintln!("interrupted: stopping etcd and the servers the etcd side by side started");
            stop_all();
            std::process::exit(130);
        });
    });
}

/// Whether process `pid` has exited (gone, or a zombie its owner has not reaped).
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

fn stop_all() {
    let running = std::mem::take(&mut *RUNNING.lock().unwrap_or_else(PoisonError::into_inner));
    let kill = |signal: &str, pid: u32| {
        let _ = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status();
    };
    for &(pid, _) in &running {
        kill("-TERM", pid);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while running.iter().any(|&(pid, _)| !exited(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for (pid, dir) in running {
        if !exited(pid) {
            kill("-KILL", pid);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
