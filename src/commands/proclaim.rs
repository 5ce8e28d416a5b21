//! `LOCK.PROCLAIM key token value` → 1 if `token` holds the lock exclusively now (its
//! public value becomes `value`; its fence, lease and session stay), else 0. A lock held
//! shared is `WRONGMODE`: only an exclusive holding carries a value. Observers
//! (`LOCK.OBSERVE`) hear of a value that changed.

use fencelock_core::args::parse_value;
use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use fencelock_core::value::LockRef;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis_on;
use crate::blocking;
use crate::config;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, RW, UPDATE};
use crate::ffi::lock_key::LockKey;
use crate::keyspace::effects::{self, Change};

pub struct Proclaim;

impl Command for Proclaim {
    const NAME: &'static str = "lock.proclaim";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let name = args.get(1).map_or(&[][..], RedisString::as_slice);
        proclaim(ctx, args).map_err(to_redis_on(name))
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Proclaim::NAME,
    entry: Some(entry::<Proclaim>),
    flags: c"write deny-oom fast",
    categories: "write fast",
    replication_form: false,
    summary: "Sets the public value of the exclusive holding of token (its fence and lease stay).",
    since: c"0.3.0",
    complexity: c"O(1) (plus the length of the value)",
    arity: 4,
    keys: Keys::One(RW.with(UPDATE)),
};

fn proclaim(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, token, value] = args else {
        return Err(CommandError::WrongArity);
    };
    let token = parse_compared_token(token.as_slice(), config::limits().max_token_length)?;
    let value = parse_value(value.as_slice(), config::max_value_length())?;
    let mut key = LockKey::open(ctx, name, true);
    let now_ms = key.holders_clock_ms();
    effects::drop_ended(ctx, &mut key, now_ms)?;
    match key.lock()? {
        Some(LockRef::Shared(set)) => Err(CommandError::WrongMode(set.mode())),
        Some(LockRef::Exclusive(holding)) if holding.is_token(token.bytes) => {
            if effects::proclaim(ctx, &mut key, value)? {
                // A lock-delay key's expiry was written again from the holding: the
                // queue's handoff follows it, as after any moved lease.
                blocking::after(ctx, &mut key, Change::Extended);
            }
            Ok(RedisValue::Integer(1))
        }
        _ => Ok(RedisValue::Integer(0)),
    }
}
