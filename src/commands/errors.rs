//! Every error reply fencelock sends, worded as Redis words its own.

use redis_module::RedisError;

/// A reason to refuse a command. Each maps to exactly one reply text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandError {
    WrongArity,
    NotAnInteger,
    /// Carries the lowercase command name, as Redis quotes it.
    InvalidExpire(&'static str),
    NegativeTimeout,
    TimeoutOutOfRange,
    Syntax,
    InvalidToken,
    InvalidFence,
    WrongType,
    TooManyWaiters,
    FencesExhausted,
    /// Redis refused a write the module asked for (should not happen on a valid key).
    WriteFailed,
}

impl From<CommandError> for RedisError {
    fn from(error: CommandError) -> Self {
        match error {
            CommandError::WrongArity => RedisError::WrongArity,
            CommandError::NotAnInteger => {
                RedisError::Str("ERR value is not an integer or out of range")
            }
            CommandError::InvalidExpire(command) => {
                RedisError::String(format!("ERR invalid expire time in '{command}' command"))
            }
            CommandError::NegativeTimeout => RedisError::Str("ERR timeout is negative"),
            CommandError::TimeoutOutOfRange => RedisError::Str("ERR timeout is out of range"),
            CommandError::Syntax => RedisError::Str("ERR syntax error"),
            CommandError::InvalidToken => RedisError::Str("ERR invalid token"),
            CommandError::InvalidFence => RedisError::Str("ERR invalid fence"),
            CommandError::WrongType => {
                RedisError::Str("WRONGTYPE Operation against a key holding the wrong kind of value")
            }
            CommandError::TooManyWaiters => RedisError::Str("ERR too many waiters"),
            CommandError::FencesExhausted => {
                RedisError::Str("ERR no fence left to issue: the fence clock is at its maximum")
            }
            CommandError::WriteFailed => RedisError::Str("ERR lock key could not be written"),
        }
    }
}

impl From<crate::store::WrongType> for CommandError {
    fn from(_: crate::store::WrongType) -> Self {
        CommandError::WrongType
    }
}
