//! Every error reply fencelock sends, worded as Redis words its own. The texts live
//! here, once; the module only hands them to Redis.

use std::borrow::Cow;

use crate::mode::Mode;

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
    /// Under `maxmemory` (noeviction): a new grant or waiter would need memory.
    OutOfMemory,
    /// A guarded command, and the token does not hold the lock.
    NotHeld,
    /// A fenced command below the mark (carries the highest admitted fence).
    Stale(u64),
    /// A guarded or fenced command may not run this inner command.
    NotAllowedInside,
    /// A fenced command whose inner command names the mark itself.
    OwnMarkInside,
    /// `LOCK.APPLY` of a shared holder with a fence another holder of the key has.
    FenceTaken,
    /// In a cluster, keys that do not hash to one slot.
    CrossSlot,
    /// `LIMIT` below 1 or above `fencelock.max-holders`.
    InvalidLimit,
    /// The mode or limit asked for differs from the lock's (carries the lock's); the
    /// reply names the key, so the command layer words it (`wrong_mode`).
    WrongMode(Mode),
    /// A session name empty or over `fencelock.max-token-length`.
    InvalidSession,
    /// The token holds the key under another session (or none); the reply names the key.
    WrongSession,
    /// `numkeys` below 1.
    NumkeysTooFew,
    /// `numkeys` above `fencelock.max-keys` (carries it).
    NumkeysTooMany(usize),
    /// A `VALUE` (or a proclaimed one) longer than `fencelock.max-value-length`.
    ValueTooLong,
    /// `VALUE` asked with `SHARED` or `LIMIT`.
    ValueNotExclusive,
    /// A run-once claim whose fingerprint differs from the key's.
    Fingerprint,
    /// A `FINGERPRINT` empty or longer than `fencelock.max-token-length`.
    InvalidFingerprint,
    /// A `LOCK.DONE` result longer than `fencelock.max-result-length`.
    ResultTooLong,
    /// A count that must be positive is 0 or below (`LOCK.TOP COUNT`).
    NotPositive,
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
            CommandError::OutOfMemory => {
                "OOM command not allowed when used memory > 'maxmemory'.".into()
            }
            CommandError::NotHeld => "NOTHELD this token does not hold the lock".into(),
            CommandError::Stale(highest) => {
                format!("STALE fence is below the highest admitted ({highest})").into()
            }
            CommandError::OwnMarkInside => "ERR a fenced command may not touch its own mark".into(),
            CommandError::FenceTaken => "ERR another holder of the lock has this fence".into(),
            CommandError::NotAllowedInside => {
                "ERR this command is not allowed inside LOCK.GUARD or LOCK.FENCED".into()
            }
            CommandError::CrossSlot => {
                "CROSSSLOT Keys in request don't hash to the same slot".into()
            }
            CommandError::InvalidLimit => "ERR invalid limit".into(),
            CommandError::WrongMode(mode) => format!("WRONGMODE the lock {mode}").into(),
            CommandError::InvalidSession => "ERR invalid session".into(),
            CommandError::WrongSession => {
                "WRONGSESSION this token holds the lock in another session".into()
            }
            CommandError::NumkeysTooFew => "ERR numkeys should be greater than 0".into(),
            CommandError::NumkeysTooMany(max) => {
                format!("ERR numkeys should be at most {max}").into()
            }
            CommandError::ValueTooLong => {
                "ERR value exceeds maximum allowed size (fencelock.max-value-length)".into()
            }
            CommandError::ValueNotExclusive => {
                "WRONGMODE only an exclusive holding carries a value".into()
            }
            CommandError::Fingerprint => {
                "FINGERPRINT this key was claimed with another fingerprint".into()
            }
            CommandError::InvalidFingerprint => "ERR invalid fingerprint".into(),
            CommandError::ResultTooLong => {
                "ERR result exceeds maximum allowed size (fencelock.max-result-length)".into()
            }
            // Redis's own wording for a count that must be positive (`LPOP key 0` …).
            CommandError::NotPositive => "ERR value is out of range, must be positive".into(),
        }
    }

    /// The error reply for a command on `key`: as `message`, except that `WRONGMODE`
    /// names the key (`WRONGMODE lock:x is a semaphore with limit 5`).
    pub fn message_for_key(&self, key: &[u8]) -> Cow<'static, str> {
        match self {
            CommandError::WrongMode(mode) => {
                format!("WRONGMODE {} {mode}", String::from_utf8_lossy(key)).into()
            }
            CommandError::WrongSession => format!(
                "WRONGSESSION this token holds {} in another session",
                String::from_utf8_lossy(key)
            )
            .into(),
            _ => self.message(),
        }
    }
}

/// A waiter's or observer's key moved to another node (`MIGRATE`): retry there.
pub const MOVED: &str = "TRYAGAIN the lock moved to another node, retry the command";

/// The same key given twice to a command of several keys.
pub fn duplicate_key(key: &[u8]) -> String {
    format!("ERR duplicate key '{}'", String::from_utf8_lossy(key))
}

/// A wait for `key` would close a cycle: it would wait for `other`, which its own owner
/// holds (or waits for).
pub fn deadlock(key: &[u8], other: &[u8]) -> String {
    format!(
        "DEADLOCK waiting for {} would wait for {} held by this owner",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(other)
    )
}

/// A keyless command (the session commands) would touch `key`, which the calling user
/// may not: Redis's own wording for a key the user has no permission for.
pub fn no_permission(user: &[u8], key: &[u8]) -> String {
    format!(
        "NOPERM User {} has no permissions to access the '{}' key",
        String::from_utf8_lossy(user),
        String::from_utf8_lossy(key)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrongmode_names_the_key_and_what_it_is() {
        let error = CommandError::WrongMode(Mode::Semaphore(5));
        assert_eq!(
            error.message_for_key(b"lock:x"),
            "WRONGMODE lock:x is a semaphore with limit 5"
        );
        assert_eq!(
            CommandError::WrongMode(Mode::Shared).message_for_key(b"k"),
            "WRONGMODE k is held shared"
        );
        assert_eq!(
            CommandError::Syntax.message_for_key(b"k"),
            "ERR syntax error"
        );
        assert_eq!(
            CommandError::WrongSession.message_for_key(b"lock:x"),
            "WRONGSESSION this token holds lock:x in another session"
        );
        assert_eq!(
            deadlock(b"acct:1", b"acct:2"),
            "DEADLOCK waiting for acct:1 would wait for acct:2 held by this owner"
        );
        assert_eq!(duplicate_key(b"a"), "ERR duplicate key 'a'");
        assert_eq!(
            CommandError::NumkeysTooMany(64).message(),
            "ERR numkeys should be at most 64"
        );
        assert_eq!(
            CommandError::Fingerprint.message(),
            "FINGERPRINT this key was claimed with another fingerprint"
        );
        assert_eq!(
            no_permission(b"alice", b"lock:x"),
            "NOPERM User alice has no permissions to access the 'lock:x' key"
        );
    }
}
