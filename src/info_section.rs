//! `INFO fencelock`: counters since start and the current gauges.

use redis_module::{InfoContext, RedisResult};
use redis_module_macros::info_command_handler;

use crate::blocking;
use crate::stats;

#[info_command_handler]
fn fencelock_info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    ctx.builder()
        .add_section("stats")
        .field("acquired", as_i64(stats::ACQUIRED.get()))?
        .field("contended", as_i64(stats::CONTENDED.get()))?
        .field("released", as_i64(stats::RELEASED.get()))?
        .field("refreshed", as_i64(stats::REFRESHED.get()))?
        .field("expired", as_i64(stats::EXPIRED.get()))?
        .field("handoffs", as_i64(stats::HANDOFFS.get()))?
        .field("block_timeouts", as_i64(stats::BLOCK_TIMEOUTS.get()))?
        .field(
            "waiters",
            i64::try_from(blocking::total_waiters()).unwrap_or(i64::MAX),
        )?
        .field("held_locks", stats::LIVE_LOCKS.get())?
        .build_section()?
        .build_info()?;
    Ok(())
}
