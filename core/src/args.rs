//! Argument parsing shared by the commands: integers as strict as Redis's, tokens,
//! ttls and option lists. Pure functions over byte slices, limits passed in.

use crate::error::CommandError;
use crate::token;

/// Parses a signed 64-bit integer exactly as Redis's `string2ll` does: optional `-`,
/// no `+`, no spaces, no leading zeros, no overflow.
pub fn parse_integer(bytes: &[u8]) -> Result<i64, CommandError> {
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
    let mut values = [None; N];
    let mut rest = args;
    while let [name, tail @ ..] = rest {
        let slot = known
            .iter()
            .position(|option| name.eq_ignore_ascii_case(option.as_bytes()))
            .ok_or(CommandError::Syntax)?;
        let [value, tail @ ..] = tail else {
            return Err(CommandError::Syntax);
        };
        let entry = values.get_mut(slot).ok_or(CommandError::Syntax)?;
        if entry.replace(*value).is_some() {
            return Err(CommandError::Syntax);
        }
        rest = tail;
    }
    Ok(values)
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
}
