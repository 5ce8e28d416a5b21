//! Where the figures came from: CPU model and count, memory, OS, kernel, the Redis
//! server's version and allocator, and how server and load generator were placed.

use std::io;

use testkit::resp::Conn;
use testkit::{module_path, server_binary};

use crate::server::info_field;

#[derive(Debug, Clone)]
pub struct Machine {
    pub cpu: String,
    pub cpus: usize,
    pub memory_gib: f64,
    pub os: String,
    pub kernel: String,
    pub redis: String,
    pub server_binary: String,
    pub module: String,
    pub placement: String,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn field<'a>(text: &'a str, key: &str, separator: char) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(separator)?;
        (name.trim() == key).then(|| value.trim())
    })
}

pub fn describe(conn: &mut Conn, placement: Option<&str>) -> io::Result<Machine> {
    let cpuinfo = read("/proc/cpuinfo");
    let meminfo = read("/proc/meminfo");
    let os_release = read("/etc/os-release");
    let memory_kib: f64 = field(&meminfo, "MemTotal", ':')
        .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let version = info_field(conn, "server", "redis_version")?;
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
        redis: format!("Redis {version} ({allocator})"),
        server_binary: server_binary(),
        module: module_path().display().to_string(),
        placement: placement
            .unwrap_or("not pinned (server and load generator share all CPUs)")
            .to_string(),
    })
}

impl Machine {
    pub fn one_line(&self) -> String {
        format!(
            "{} × {}, {:.0} GiB RAM, {}, Linux {}, {}; {}",
            self.cpus, self.cpu, self.memory_gib, self.os, self.kernel, self.redis, self.placement
        )
    }
}
