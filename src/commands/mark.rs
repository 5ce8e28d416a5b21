//! `LOCK.MARK mark fence` → OK. The effect form of an admission by `LOCK.FENCED`: what
//! the primary writes to replicas and the AOF (and what an AOF rewrite emits) to raise
//! a mark. A mark never goes down: a lower fence leaves it as it is. Applications do
//! not need it.

use fencelock_core::error::CommandError;
use fencelock_core::fence_checks::parse_fence;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, RW, UPDATE};
use crate::ffi::mark_key::MarkKey;
use crate::ffi::replicate;

pub struct Mark;

impl Command for Mark {
    const NAME: &'static str = "lock.mark";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        mark(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Mark::NAME,
    entry: Some(entry::<Mark>),
    flags: c"write deny-oom fast",
    categories: "write fast",
    replication_form: true,
    summary: "Raises a fence mark (the replicated form of an admission).",
    since: c"0.2.0",
    complexity: c"O(1)",
    arity: 3,
    keys: Keys::One(RW.with(UPDATE)),
};

fn mark(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, fence] = args else {
        return Err(CommandError::WrongArity);
    };
    let fence = parse_fence(fence.as_slice())?;
    let rises = MarkKey::open(ctx, name, false)
        .highest()?
        .is_none_or(|highest| fence > highest);
    if rises {
        MarkKey::open(ctx, name, true).raise(fence)?;
        // Deterministic: it carries its value, so it is propagated as it came.
        replicate::verbatim(ctx);
    }
    Ok(RedisValue::SimpleStringStatic("OK"))
}
