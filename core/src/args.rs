//! Argument parsing shared by the commands: integers as strict as Redis's, tokens,
//! ttls and option lists. Pure functions over byte slices, limits passed in.

use crate::error::CommandError;
use crate::mode::Mode;
use crate::token;

/// Parses a signed 64-bit integer exactly as Redis's `string2ll` does: optional `-`,
/// no `+`, no spaces, no leading zeros, no overflow.
pub fn parse_integer(bytes: &[u8]) -> Result<i64, CommandError> {
    // The usual argument (a ttl, a timeout): positive, at most 18 digits, so it cannot
    // overflow and one pass reads it.
    if let [first @ b'1'..=b'9', rest @ ..] = bytes {
        if rest.len() < 18 {
            let mut value = i64::from(first - b'0');
            for &digit in rest {
                let digit = digit.wrapping_sub(b'0');
                if digit > 9 {
                    return Err(CommandError::NotAnInteger);
                }
                value = value * 10 + i64::from(digit);
            }
            return Ok(value);
        }
    }
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    let valid_shape = match digits {
        [b'0'] => !negative,
        [first, rest @ ..] => (b'1'..=b'9').contains(first) && rest.iter().all(u8::is_ascii_digit),
        [] => false,
    };
    if !valid_shape {
        return Err(CommandError::NotAnInteger);
    }
    let mut magnitude: i64 = 0;
    for digit in digits {
        let value = i64::from(digit - b'0');
        magnitude = magnitude
            .checked_mul(10)
            .and_then(|m| {
                if negative {
                    m.checked_sub(value)
                } else {
                    m.checked_add(value)
                }
            })
            .ok_or(CommandError::NotAnInteger)?;
    }
    Ok(magnitude)
}

/// A lease length in ms: an integer (else not-an-integer), then positive and within
/// `max_ttl_ms` (else invalid-expire for `command`).
pub fn parse_ttl(
    bytes: &[u8],
    command: &'static str,
    max_ttl_ms: i64,
) -> Result<i64, CommandError> {
    let ttl = parse_integer(bytes)?;
    if ttl <= 0 || ttl > max_ttl_ms {
        return Err(CommandError::InvalidExpire(command));
    }
    Ok(ttl)
}

/// A client-supplied token: non-empty and within `max_len` bytes.
pub fn parse_token(bytes: &[u8], max_len: usize) -> Result<&[u8], CommandError> {
    if token::is_valid(bytes, max_len) {
        Ok(bytes)
    } else {
        Err(CommandError::InvalidToken)
    }
}

/// A session name: non-empty and within `max_len` bytes, like a token.
pub fn parse_session(bytes: &[u8], max_len: usize) -> Result<&[u8], CommandError> {
    if token::is_valid(bytes, max_len) {
        Ok(bytes)
    } else {
        Err(CommandError::InvalidSession)
    }
}

/// A `LOCKDELAY` in ms: an integer (else not-an-integer) from 0 to `max_ttl_ms` (else
/// invalid-expire for `command`, as a ttl would be).
pub fn parse_lock_delay(
    bytes: &[u8],
    command: &'static str,
    max_ttl_ms: i64,
) -> Result<u64, CommandError> {
    let delay = parse_integer(bytes)?;
    u64::try_from(delay)
        .ok()
        .filter(|_| delay <= max_ttl_ms)
        .ok_or(CommandError::InvalidExpire(command))
}

/// A holding's public value (`VALUE`, `LOCK.PROCLAIM`): at most `max_len` bytes.
pub fn parse_value(bytes: &[u8], max_len: usize) -> Result<&[u8], CommandError> {
    if bytes.len() > max_len {
        return Err(CommandError::ValueTooLong);
    }
    Ok(bytes)
}

/// Longest `BLOCK` timeout: Redis adds it to its clock in milliseconds, which must not
/// overflow (`BLPOP` refuses such timeouts the same way).
const MAX_TIMEOUT_MS: i64 = i64::MAX / 2;

/// A `BLOCK` timeout in ms; 0 means wait forever.
pub fn parse_timeout(bytes: &[u8]) -> Result<i64, CommandError> {
    let timeout = parse_integer(bytes)?;
    if timeout < 0 {
        return Err(CommandError::NegativeTimeout);
    }
    if timeout > MAX_TIMEOUT_MS {
        return Err(CommandError::TimeoutOutOfRange);
    }
    Ok(timeout)
}

/// Splits `NAME value` option pairs, matching names case-insensitively against `known`.
/// Unknown, repeated or value-less options are a syntax error. Returns each known
/// option's value (or `None`) in the order of `known`.
pub fn parse_options<'a, const N: usize>(
    args: &[&'a [u8]],
    known: [&str; N],
) -> Result<[Option<&'a [u8]>; N], CommandError> {
    parse_options_and_flags(args, known, []).map(|(values, [])| values)
}

/// Each option's value (in the order asked for), and whether each flag was given.
pub type OptionsAndFlags<'a, const N: usize, const F: usize> = ([Option<&'a [u8]>; N], [bool; F]);

/// As `parse_options`, where some options are flags without a value (`SHARED`). Read
/// left to right, so a value that spells a flag's name (`TOKEN SHARED`) is a value.
pub fn parse_options_and_flags<'a, const N: usize, const F: usize>(
    args: &[&'a [u8]],
    known: [&str; N],
    flags: [&str; F],
) -> Result<OptionsAndFlags<'a, N, F>, CommandError> {
    let mut values = [None; N];
    let mut set = [false; F];
    let mut rest = args;
    while let [name, tail @ ..] = rest {
        let matches = |option: &&str| name.eq_ignore_ascii_case(option.as_bytes());
        if let Some(flag) = flags.iter().position(matches) {
            let entry = set.get_mut(flag).ok_or(CommandError::Syntax)?;
            if std::mem::replace(entry, true) {
                return Err(CommandError::Syntax);
            }
            rest = tail;
            continue;
        }
        let slot = known.iter().position(matches).ok_or(CommandError::Syntax)?;
        let [value, tail @ ..] = tail else {
            return Err(CommandError::Syntax);
        };
        let entry = values.get_mut(slot).ok_or(CommandError::Syntax)?;
        if entry.replace(*value).is_some() {
            return Err(CommandError::Syntax);
        }
        rest = tail;
    }
    Ok((values, set))
}

/// The mode `LOCK.ACQUIRE` asks for: `LIMIT n` (a semaphore, implying `SHARED`), else
/// `SHARED`, else exclusive. `n` must be an integer (else not-an-integer) from 1 to
/// `max_holders` (else invalid-limit).
pub fn parse_mode(
    shared: bool,
    limit: Option<&[u8]>,
    max_holders: usize,
) -> Result<Mode, CommandError> {
    let Some(limit) = limit else {
        return Ok(if shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        });
    };
    let limit = parse_integer(limit)?;
    let within = usize::try_from(limit).is_ok_and(|n| (1..=max_holders).contains(&n));
    match u32::try_from(limit) {
        Ok(limit) if within => Ok(Mode::Semaphore(limit)),
        _ => Err(CommandError::InvalidLimit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_redis_rules() {
        assert_eq!(parse_integer(b"0"), Ok(0));
        assert_eq!(parse_integer(b"1500"), Ok(1500));
        assert_eq!(parse_integer(b"-7"), Ok(-7));
        assert_eq!(parse_integer(b"9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_integer(b"-9223372036854775808"), Ok(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.5",
            b"1e3",
            b"abc",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"\xff",
        ] {
            assert_eq!(
                parse_integer(bad),
                Err(CommandError::NotAnInteger),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn options_are_case_insensitive_unique_and_complete() {
        let args: [&[u8]; 4] = [b"block", b"5", b"TOKEN", b"t"];
        assert_eq!(
            parse_options(&args, ["TOKEN", "BLOCK"]),
            Ok([Some(&b"t"[..]), Some(&b"5"[..])])
        );
        let repeated: [&[u8]; 4] = [b"TOKEN", b"a", b"token", b"b"];
        assert_eq!(
            parse_options(&repeated, ["TOKEN"]),
            Err(CommandError::Syntax)
        );
        let incomplete: [&[u8]; 1] = [b"TOKEN"];
        assert_eq!(
            parse_options(&incomplete, ["TOKEN"]),
            Err(CommandError::Syntax)
        );
        let unknown: [&[u8]; 2] = [b"NX", b"1"];
        assert_eq!(
            parse_options(&unknown, ["TOKEN"]),
            Err(CommandError::Syntax)
        );
        let none: [&[u8]; 0] = [];
        assert_eq!(parse_options(&none, ["TOKEN"]), Ok([None]));
    }

    #[test]
    fn flags_take_no_value_and_values_may_spell_a_flag() {
        let args: [&[u8]; 5] = [b"shared", b"TOKEN", b"SHARED", b"LIMIT", b"3"];
        assert_eq!(
            parse_options_and_flags(&args, ["TOKEN", "LIMIT"], ["SHARED"]),
            Ok(([Some(&b"SHARED"[..]), Some(&b"3"[..])], [true]))
        );
        let twice: [&[u8]; 2] = [b"SHARED", b"shared"];
        assert_eq!(
            parse_options_and_flags(&twice, ["TOKEN"], ["SHARED"]),
            Err(CommandError::Syntax)
        );
    }

    #[test]
    fn sessions_are_checked_like_tokens_and_lock_delays_like_ttls() {
        assert_eq!(parse_session(b"s", 4), Ok(&b"s"[..]));
        assert_eq!(parse_session(b"", 4), Err(CommandError::InvalidSession));
        assert_eq!(
            parse_session(b"sssss", 4),
            Err(CommandError::InvalidSession)
        );
        assert_eq!(parse_lock_delay(b"0", "lock.acquire", 10), Ok(0));
        assert_eq!(parse_lock_delay(b"10", "lock.acquire", 10), Ok(10));
        for bad in [&b"11"[..], b"-1"] {
            assert_eq!(
                parse_lock_delay(bad, "lock.acquire", 10),
                Err(CommandError::InvalidExpire("lock.acquire"))
            );
        }
        assert_eq!(
            parse_lock_delay(b"x", "lock.acquire", 10),
            Err(CommandError::NotAnInteger)
        );
    }

    #[test]
    fn modes_follow_shared_and_limit() {
        assert_eq!(parse_mode(false, None, 10), Ok(Mode::Exclusive));
        assert_eq!(parse_mode(true, None, 10), Ok(Mode::Shared));
        assert_eq!(parse_mode(false, Some(b"3"), 10), Ok(Mode::Semaphore(3)));
        assert_eq!(parse_mode(true, Some(b"10"), 10), Ok(Mode::Semaphore(10)));
        for bad in [&b"0"[..], b"-1", b"11"] {
            assert_eq!(
                parse_mode(false, Some(bad), 10),
                Err(CommandError::InvalidLimit)
            );
        }
        assert_eq!(
            parse_mode(false, Some(b"x"), 10),
            Err(CommandError::NotAnInteger)
        );
    }
}
