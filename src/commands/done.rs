//! `LOCK.DONE key token result` → 1 when `token` runs the run-once claim of `key`: the
//! claim becomes a done record holding `result` (with the run's fingerprint and fence)
//! for its keep time, and every duplicate waiting for it is answered `[nil, fence,
//! result]` at once. 0 when the token does not run it (any more); nothing changes. A
//! result over `fencelock.max-result-length` is refused and changes nothing.

use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use fencelock_core::once::{check_result, done_step, kept_until, DoneStep, Found};
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::config;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, RW, UPDATE};
use crate::ffi::lock_key::LockKey;
use crate::ffi::server_clock as clock;
use crate::keyspace::effects::Change;
use crate::keyspace::once;

pub struct Done;

impl Command for Done {
    const NAME: &'static str = "lock.done";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        done(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Done::NAME,
    entry: Some(entry::<Done>),
    flags: c"write deny-oom fast",
    categories: "write fast",
    replication_form: false,
    summary: "Stores the result of the run held by token for its keep time, answering every waiting duplicate.",
    since: c"0.4.0",
    complexity: c"O(1) plus O(k) for k duplicates waiting (and the length of the result)",
    arity: 4,
    keys: Keys::One(RW.with(UPDATE)),
};

fn done(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, token, result] = args else {
        return Err(CommandError::WrongArity);
    };
    let token = parse_compared_token(token.as_slice(), config::limits().max_token_length)?;
    let result = result.as_slice();
    check_result(result.len(), config::max_result_length())?;
    let mut key = LockKey::open(ctx, name, true);
    let found = Found::of(key.lock()?, key.once());
    let DoneStep::Store { .. } = done_step(found, token.bytes) else {
        return Ok(RedisValue::Integer(0));
    };
    let (keep_ms, fingerprint) = match key.once() {
        Some(record) => (record.keep_ms(), record.fingerprint().map(<[u8]>::to_vec)),
        None => return Ok(RedisValue::Integer(0)),
    };
    let until_ms =
        kept_until(clock::command_ms(), keep_ms).ok_or(CommandError::InvalidExpire("lock.done"))?;
    let fence = once::store_done(ctx, &mut key, result, until_ms)?;
    blocking::answer_done(ctx, &key, fence, fingerprint.as_deref(), result);
    // Plain acquires still waiting now wait for the end of the keep time.
    blocking::after(ctx, &mut key, Change::Extended);
    Ok(RedisValue::Integer(1))
}
