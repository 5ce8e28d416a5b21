//! Finds out where the figures come from: CPU model and count, memory, OS and kernel
//! from `/proc` and `/etc/os-release`, which server it is (the `--server` name the
//! run was given, the product and version it reports, its allocator), and how server
//! and load generator were placed.

use std::io;

use testkit::resp::Conn;
use testkit::{floor_module_path, module_path, server_binary};

use crate::measure::server::info_field;
use crate::results::machine::Machine;

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn field<'a>(text: &'a str, key: &str, separator: char) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(separator)?;
        (name.trim() == key).then(|| value.trim())
    })
}

/// "Redis 7.0.15" or "Valkey 9.1.2": Valkey keeps `redis_version` at 7.2.4 for
/// clients' sake and gives its own in `server_name` and `valkey_version`.
fn product(conn: &mut Conn) -> io::Result<String> {
    if let Ok(version) = info_field(conn, "server", "valkey_version") {
        return Ok(format!("Valkey {version}"));
    }
    Ok(format!(
        "Redis {}",
        info_field(conn, "server", "redis_version")?
    ))
}

pub fn describe(conn: &mut Conn, server: &str, placement: Option<&str>) -> io::Result<Machine> {
    let cpuinfo = read("/proc/cpuinfo");
    let meminfo = read("/proc/meminfo");
    let os_release = read("/etc/os-release");
    let memory_kib: f64 = field(&meminfo, "MemTotal", ':')
        .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let product = product(conn)?;
    let allocator = info_field(conn, "memory", "mem_allocator").unwrap_or_default();
    Ok(Machine {
        cpu: field(&cpuinfo, "model name", ':')
            .unwrap_or("unknown CPU")
            .to_string(),
        // Counted from /proc: this process may already be pinned to one CPU.
        cpus: cpuinfo
            .lines()
            .filter(|line| line.starts_with("processor"))
            .count()
            .max(1),
        memory_gib: memory_kib / (1024.0 * 1024.0),
        os: field(&os_release, "PRETTY_NAME", '=')
            .unwrap_or("unknown OS")
            .trim_matches('"')
            .to_string(),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        server: server.to_string(),
        redis: format!("{product} ({allocator})"),
        server_binary: server_binary(),
        module: module_path().display().to_string(),
        floor_module: floor_module_path().display().to_string(),
        placement: placement
            .unwrap_or("not pinned (server and load generator share all CPUs)")
            .to_string(),
    })
}
