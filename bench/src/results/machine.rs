//! Where the figures came from: the machine (CPU model and count, memory, OS, kernel),
//! which server it was (the `--server` name the run was given, the product and version
//! it reports, its allocator), how server and load generator were placed, and which
//! native owner checks the server accepted. Found out by `measure::machine` and
//! `measure::natives`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cpus: usize,
    pub memory_gib: f64,
    pub os: String,
    pub kernel: String,
    /// The name the run was given (`make bench SERVER=…`), e.g. `valkey-9.1`.
    pub server: String,
    /// Product, version and allocator as the server reports them.
    pub redis: String,
    pub server_binary: String,
    pub module: String,
    /// The floor module loaded beside it (`bench/floor`); empty in a report from
    /// before the floor rows.
    #[serde(default)]
    pub floor_module: String,
    pub placement: String,
}

impl Machine {
    pub fn one_line(&self) -> String {
        format!(
            "{} × {}, {:.0} GiB RAM, {}, Linux {}, server {}: {}; {}",
            self.cpus,
            self.cpu,
            self.memory_gib,
            self.os,
            self.kernel,
            self.server,
            self.redis,
            self.placement
        )
    }
}

/// Which native owner checks the server under test accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Natives {
    /// `DELIFEQ key value`: delete if the value equals.
    pub delifeq: bool,
    /// `DELEX key IFEQ value`.
    pub delex_ifeq: bool,
    /// `SET key value IFEQ value PX ms`: set (and so re-arm the lease) if equal.
    pub set_ifeq: bool,
}

impl Natives {
    /// For the report: the native commands found, or that there are none.
    pub fn describe(&self) -> String {
        let found: Vec<&str> = [
            (self.delifeq, "DELIFEQ"),
            (self.delex_ifeq, "DELEX … IFEQ"),
            (self.set_ifeq, "SET … IFEQ"),
        ]
        .iter()
        .filter(|(has, _)| *has)
        .map(|(_, name)| *name)
        .collect();
        if found.is_empty() {
            "no native owner checks (DELIFEQ, DELEX … IFEQ, SET … IFEQ all refused)".into()
        } else {
            format!("native owner checks: {}", found.join(", "))
        }
    }
}
