//! `LOCK.CLOCK last-fence mark-floor` → OK. The effect form of the node's own state:
//! raises the fence clock to at least `last-fence` and the floor of evicted marks to at
//! least `mark-floor` (0 for either: leave it). The primary writes it to replicas and
//! the AOF when it evicts a mark, and an AOF rewritten without the RDB preamble starts
//! with it. Neither value ever goes down. Applications do not need it.

use fencelock_core::error::CommandError;
use fencelock_core::fence_checks::parse_node_fence;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys};
use crate::ffi::replicate;
use crate::node_fence;

pub struct Clock;

impl Command for Clock {
    const NAME: &'static str = "lock.clock";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        clock(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Clock::NAME,
    entry: Some(entry::<Clock>),
    flags: c"write fast",
    categories: "write fast",
    replication_form: true,
    summary: "Raises the node's fence clock and mark floor (the replicated form of both).",
    since: c"0.2.0",
    complexity: c"O(1)",
    arity: 3,
    keys: Keys::Declared,
};

fn clock(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, last, floor] = args else {
        return Err(CommandError::WrongArity);
    };
    let (last, floor) = (
        parse_node_fence(last.as_slice())?,
        parse_node_fence(floor.as_slice())?,
    );
    node_fence::observe(last);
    node_fence::raise_mark_floor(floor);
    // Deterministic: it carries its values, so it is propagated as it came.
    replicate::verbatim(ctx);
    Ok(RedisValue::SimpleStringStatic("OK"))
}
