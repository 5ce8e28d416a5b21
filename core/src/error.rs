//! Every error reply fencelock sends, worded as Redis words its own. The texts live
//! here, once; the module only hands them to Redis.

use std::borrow::Cow;

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
    /// A guarded command, and the token does not hold the lock.
    NotHeld,
    /// A fenced command below the mark (carries the highest admitted fence).
    Stale(u64),
    /// A guarded or fenced command may not run this inner command.
    NotAllowedInside,
    /// In a cluster, keys that do not hash to one slot.
    CrossSlot,
}

impl CommandError {
    /// The error reply, first word the error code. Arity errors are worded by the
    /// server itself (it knows the command's name as the client spelled it), so the
    /// module sends those through Redis's own arity reply.
    pub fn message(&self) -> Cow<'static, str> {
        match self {
            CommandError::WrongArity => "ERR wrong number of arguments".into(),
            CommandError::NotAnInteger => "ERR value is not an integer or out of range".into(),
            CommandError::InvalidExpire(command) => {
                format!("ERR invalid expire time in '{command}' command").into()
            }
            CommandError::NegativeTimeout => "ERR timeout is negative".into(),
            CommandError::TimeoutOutOfRange => "ERR timeout is out of range".into(),
            CommandError::Syntax => "ERR syntax error".into(),
            CommandError::InvalidToken => "ERR invalid token".into(),
            CommandError::InvalidFence => "ERR invalid fence".into(),
            CommandError::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value".into()
            }
            CommandError::TooManyWaiters => "ERR too many waiters".into(),
            CommandError::FencesExhausted => {
                "ERR no fence left to issue: the fence clock is at its maximum".into()
            }
            CommandError::WriteFailed => "ERR lock key could not be written".into(),
            CommandError::NotHeld => "NOTHELD this token does not hold the lock".into(),
            CommandError::Stale(highest) => {
                format!("STALE fence is below the highest admitted ({highest})").into()
            }
            CommandError::NotAllowedInside => {
                "ERR this command is not allowed inside LOCK.GUARD or LOCK.FENCED".into()
            }
            CommandError::CrossSlot => {
                "CROSSSLOT Keys in request don't hash to the same slot".into()
            }
        }
    }
}
