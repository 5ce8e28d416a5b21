//! `LOCK.GUARD key token command [arg ...]` → the command's own reply, if `token` holds
//! the lock `key` now (checked and run in one atomic step), else
//! `-NOTHELD this token does not hold the lock` and nothing runs. The inner command
//! runs as the calling user, under script rules, and replicates its own effects; the
//! check writes nothing.

use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use super::support::inner_command;
use crate::config;
use crate::ffi::argv::{entry, Command};
use crate::ffi::call::call_and_forward;
use crate::ffi::command_table::{CommandSpec, Keys};
use crate::ffi::getkeys;
use crate::ffi::lock_key::LockKey;
use crate::stats;

/// Where the inner command starts in argv.
const INNER: usize = 3;

pub struct Guard;

impl Command for Guard {
    const NAME: &'static str = "lock.guard";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let [_, name, token, _command, ..] = args else {
            return Err(RedisError::WrongArity);
        };
        if getkeys::is_position_request(ctx) {
            getkeys::declare(ctx, 1, getkeys::READ);
            getkeys::declare_inner(ctx, &args[INNER..], INNER);
            return Ok(RedisValue::NoReply);
        }
        check(ctx, name, token, &args[INNER..]).map_err(to_redis)?;
        stats::GUARDED.bump();
        call_and_forward(ctx, &args[INNER..])
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
/// It runs another command, and declares that command's keys when Redis asks.
pub const SPEC: CommandSpec = CommandSpec {
    name: Guard::NAME,
    entry: Some(entry::<Guard>),
    flags: c"may-replicate getkeys-api",
    categories: "write",
    replication_form: false,
    summary: "Runs a command only while token holds the lock, atomically with the check.",
    since: c"0.2.0",
    complexity: c"O(1) for the check, plus the inner command's own",
    arity: -4,
    keys: Keys::Declared,
};

/// Whether the guarded command may run: allowed inside a guard, and `token` holds the
/// lock now. The lock key is closed again before the command runs.
fn check(
    ctx: &Context,
    name: &RedisString,
    token: &RedisString,
    inner: &[RedisString],
) -> Result<(), CommandError> {
    inner_command::check(ctx, name, inner)?;
    let token = parse_compared_token(token.as_slice(), config::limits().max_token_length)?;
    let key = LockKey::open(ctx, name, false);
    if token.holds(key.lock(), key.holders_clock_ms())? {
        Ok(())
    } else {
        stats::GUARD_REFUSED.bump();
        Err(CommandError::NotHeld)
    }
}
