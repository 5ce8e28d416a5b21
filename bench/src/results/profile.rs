//! Scenario 5's results: where the server's time goes, per command kind — CPU time
//! and bytes on the wire, and where callgrind ran, instructions and allocator calls.

use serde::{Deserialize, Serialize};

use crate::stats::nullable;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProfileResult {
    #[serde(rename = "per_command")]
    pub rows: Vec<Row>,
    /// Why there are no instruction counts, when there are none.
    pub without_callgrind: Option<String>,
}

/// Per-command figures of one command kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    #[serde(rename = "command")]
    pub label: String,
    /// Server event-loop CPU time per command (NaN without `/proc/<pid>/schedstat`).
    #[serde(rename = "server_cpu_us", with = "nullable")]
    pub cpu_us: f64,
    #[serde(rename = "request_bytes", with = "nullable")]
    pub bytes_in: f64,
    #[serde(rename = "reply_bytes", with = "nullable")]
    pub bytes_out: f64,
    /// `None` without callgrind.
    pub counts: Option<PerCommand>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PerCommand {
    #[serde(with = "nullable")]
    pub instructions: f64,
    #[serde(with = "nullable")]
    pub allocations: f64,
}
