//! Error replies as Redis errors: the texts are the core's (`fencelock_core::error`);
//! arity errors go through Redis's own wording, which names the command.

use fencelock_core::error::CommandError;
use redis_module::RedisError;
use std::borrow::Cow;

pub fn to_redis(error: CommandError) -> RedisError {
    match (error, error.message()) {
        (CommandError::WrongArity, _) => RedisError::WrongArity,
        (_, Cow::Borrowed(text)) => RedisError::Str(text),
        (_, Cow::Owned(text)) => RedisError::String(text),
    }
}
