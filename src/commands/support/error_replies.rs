//! Error replies as Redis errors: the texts are the core's (`fencelock_core::error`);
//! arity errors go through Redis's own wording, which names the command.

use fencelock_core::error::CommandError;
use redis_module::RedisError;
use std::borrow::Cow;

pub fn to_redis(error: CommandError) -> RedisError {
    reply_of(error, error.message())
}

/// As `to_redis`, for a command on `key` (`WRONGMODE` names it).
pub fn to_redis_on(key: &[u8]) -> impl Fn(CommandError) -> RedisError + '_ {
    move |error| reply_of(error, error.message_for_key(key))
}

fn reply_of(error: CommandError, message: Cow<'static, str>) -> RedisError {
    match (error, message) {
        (CommandError::WrongArity, _) => RedisError::WrongArity,
        (_, Cow::Borrowed(text)) => RedisError::Str(text),
        (_, Cow::Owned(text)) => RedisError::String(text),
    }
}
