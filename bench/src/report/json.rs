//! `report.json`: every sample of the run (per repetition), the summaries and the
//! targets, for tools and for comparing runs.

use serde_json::{json, Value};

use crate::measure::contention::Sample;
use crate::report::targets::Target;
use crate::results::Results;
use crate::stats::{percentile_ms, spread, Spread};

fn summary(s: Spread) -> Value {
    json!({ "median": s.median, "min": s.min, "max": s.max })
}

fn samples(values: &[f64]) -> Value {
    json!({ "samples": values, "summary": summary(spread(values)) })
}

fn contention_sample(s: &Sample) -> Value {
    json!({
        "grants_per_s": s.grants_per_s,
        "wait_ms": {
            "p50": s.p50_ms,
            "p90": percentile_ms(&s.waits, 90.0),
            "p99": s.p99_ms,
            "max": s.max_ms,
            "count": s.waits.len(),
        },
        "failed_attempts": s.failed,
        "failed_per_grant": s.failed_per_grant,
        "lost_leases": s.lost,
        "jain": s.jain,
        "per_client_grants": s.per_client_grants,
    })
}

pub fn report(results: &Results, targets: &[Target]) -> Value {
    let m = &results.machine;
    let s = &results.settings;
    json!({
        "machine": {
            "cpu": m.cpu,
            "cpus": m.cpus,
            "memory_gib": m.memory_gib,
            "os": m.os,
            "kernel": m.kernel,
            "server": m.server,
            "redis": m.redis,
            "server_binary": m.server_binary,
            "module": m.module,
            "placement": m.placement,
        },
        "run": {
            "smoke": s.smoke,
            "started_unix": results.started_unix,
            "elapsed_s": results.elapsed_s,
            "repetitions": s.repetitions,
            "connections": s.connections,
            "pipeline_depth": s.depth,
            "pipelined_commands_per_connection": s.pipelined_commands,
            "unpipelined_commands_per_connection": s.unpipelined_commands,
            "contention_ms": s.contention_ms,
            "contention_clients": s.contention_clients,
            "semaphore_clients": s.semaphore_clients,
            "semaphore_limit": s.semaphore_limit,
            "memory_locks": results.memory.locks,
        },
        "throughput": results.throughput.iter().map(|g| json!({
            "group": g.id,
            "title": g.title,
            "unit": g.unit,
            "pipeline_depth": g.depth,
            "series": g.series.iter().map(|series| json!({
                "label": series.label,
                "commands_per_op": series.commands_per_op,
                "busy_retries": series.busy,
                "server_busy": series.server_busy,
                "per_second": samples(&series.samples),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "ratios": results.ratios().iter().map(|r| json!({
            "group": r.group,
            "mode": r.mode(),
            "fencelock": r.fencelock,
            "baseline": r.baseline,
            "ratio": samples(&r.samples),
        })).collect::<Vec<_>>(),
        "contention": results.contention.iter().map(|c| json!({
            "lock": c.lock.label(),
            "clients": c.clients,
            "mechanism": c.mode.label(),
            "repetitions": c.samples.iter().map(contention_sample).collect::<Vec<_>>(),
            "summary": {
                "grants_per_s": summary(spread(&c.samples.iter().map(|s| s.grants_per_s).collect::<Vec<_>>())),
                "wait_p50_ms": summary(spread(&c.samples.iter().map(|s| s.p50_ms).collect::<Vec<_>>())),
                "wait_p99_ms": summary(spread(&c.samples.iter().map(|s| s.p99_ms).collect::<Vec<_>>())),
                "wait_max_ms": summary(spread(&c.samples.iter().map(|s| s.max_ms).collect::<Vec<_>>())),
                "failed_per_grant": summary(spread(&c.samples.iter().map(|s| s.failed_per_grant).collect::<Vec<_>>())),
                "jain": summary(spread(&c.samples.iter().map(|s| s.jain).collect::<Vec<_>>())),
            },
        })).collect::<Vec<_>>(),
        "memory": {
            "locks": results.memory.locks,
            "bytes_per_held_lock": {
                "fencelock": samples(&results.memory.fencelock_held),
                "set_nx_px": samples(&results.memory.set_held),
                "set_nx_px_with_fence_key": samples(&results.memory.set_with_fence_held),
            },
            "bytes_left_per_released_name": {
                "fencelock": samples(&results.memory.fencelock_left),
                "lua_pattern": samples(&results.memory.lua_left),
            },
        },
        "natives": {
            "delifeq": results.natives.delifeq,
            "delex_ifeq": results.natives.delex_ifeq,
            "set_ifeq": results.natives.set_ifeq,
        },
        "profile": {
            "profile_commands_per_connection": s.profile_commands,
            "without_callgrind": results.profile.without_callgrind,
            "per_command": results.profile.rows.iter().map(|r| json!({
                "command": r.label,
                "instructions": r.counts.map(|c| c.instructions),
                "allocations": r.counts.map(|c| c.allocations),
                "server_cpu_us": r.cpu_us,
                "request_bytes": r.bytes_in,
                "reply_bytes": r.bytes_out,
            })).collect::<Vec<_>>(),
        },
        "targets": targets.iter().map(|t| json!({
            "name": t.name,
            "wanted": t.wanted,
            "measured": summary(t.measured),
            "unit": t.unit,
            "decimals": t.decimals,
            "met": t.met,
        })).collect::<Vec<_>>(),
    })
}
