//! `LOCK.TOP [COUNT n] [BY waiters|held]`: its arguments and the order of its entries
//! (`[key, waiters, longest-wait-ms, held-ms]`). Pure: the module gathers the entries
//! from the keys it keeps track of (held or waited for) and ranks them here.

use std::cmp::Reverse;

use crate::args::{parse_integer, parse_options};
use crate::error::CommandError;

/// Entries listed when `COUNT` is not given.
pub const DEFAULT_COUNT: usize = 10;

/// What the entries are ordered by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// Most queued waiters first (the default).
    Waiters,
    /// The longest current holding first.
    Held,
}

/// A parsed `LOCK.TOP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopRequest {
    pub count: usize,
    pub by: By,
}

/// One key's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    /// Clients queued for the key.
    pub waiters: usize,
    /// How long the first of them has waited, ms (0 without waiters).
    pub longest_wait_ms: u64,
    /// How long the current holding has lasted, ms: a shared lock's oldest holder's
    /// (0 without a holder).
    pub held_ms: u64,
}

/// Parses the arguments after the command name. `COUNT` an integer (else
/// not-an-integer) of at least 1 (else not-positive); `BY` one of the two words; any
/// other, repeated or incomplete option is a syntax error.
pub fn parse(args: &[&[u8]]) -> Result<TopRequest, CommandError> {
    let [count, by] = parse_options(args, ["COUNT", "BY"])?;
    let count = match count {
        None => DEFAULT_COUNT,
        Some(count) => match parse_integer(count)? {
            n if n < 1 => return Err(CommandError::NotPositive),
            n => usize::try_from(n).unwrap_or(usize::MAX),
        },
    };
    let by = match by {
        None => By::Waiters,
        Some(word) if word.eq_ignore_ascii_case(b"waiters") => By::Waiters,
        Some(word) if word.eq_ignore_ascii_case(b"held") => By::Held,
        Some(_) => return Err(CommandError::Syntax),
    };
    Ok(TopRequest { count, by })
}

/// The first `count` of `entries` in the order asked for: by waiters, then the longest
/// wait, then the longest holding; by holding, then waiters, then the longest wait;
/// the key's name last, so that the order is always the same.
pub fn rank(mut entries: Vec<Entry>, request: TopRequest) -> Vec<Entry> {
    match request.by {
        By::Waiters => entries.sort_by(|a, b| {
            (
                Reverse(a.waiters),
                Reverse(a.longest_wait_ms),
                Reverse(a.held_ms),
                &a.key,
            )
                .cmp(&(
                    Reverse(b.waiters),
                    Reverse(b.longest_wait_ms),
                    Reverse(b.held_ms),
                    &b.key,
                ))
        }),
        By::Held => entries.sort_by(|a, b| {
            (
                Reverse(a.held_ms),
                Reverse(a.waiters),
                Reverse(a.longest_wait_ms),
                &a.key,
            )
                .cmp(&(
                    Reverse(b.held_ms),
                    Reverse(b.waiters),
                    Reverse(b.longest_wait_ms),
                    &b.key,
                ))
        }),
    }
    entries.truncate(request.count);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, waiters: usize, longest_wait_ms: u64, held_ms: u64) -> Entry {
        Entry {
            key: key.as_bytes().to_vec(),
            waiters,
            longest_wait_ms,
            held_ms,
        }
    }

    #[test]
    fn arguments_parse_as_documented() {
        let parsed = |args: &[&str]| {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            parse(&args)
        };
        assert_eq!(
            parsed(&[]),
            Ok(TopRequest {
                count: DEFAULT_COUNT,
                by: By::Waiters
            })
        );
        assert_eq!(
            parsed(&["count", "3", "by", "HELD"]),
            Ok(TopRequest {
                count: 3,
                by: By::Held
            })
        );
        assert_eq!(parsed(&["COUNT", "0"]), Err(CommandError::NotPositive));
        assert_eq!(parsed(&["COUNT", "-2"]), Err(CommandError::NotPositive));
        assert_eq!(parsed(&["COUNT", "x"]), Err(CommandError::NotAnInteger));
        assert_eq!(parsed(&["COUNT"]), Err(CommandError::Syntax));
        assert_eq!(parsed(&["BY", "fence"]), Err(CommandError::Syntax));
        assert_eq!(
            parsed(&["COUNT", "1", "COUNT", "2"]),
            Err(CommandError::Syntax)
        );
        assert_eq!(parsed(&["LIMIT", "2"]), Err(CommandError::Syntax));
    }

    #[test]
    fn entries_rank_by_waiters_or_by_holding_and_are_cut_to_count() {
        let all = vec![
            entry("quiet", 0, 0, 90_000),
            entry("hot", 5, 40, 10),
            entry("warm", 1, 900, 20),
            entry("twin-b", 1, 900, 20),
        ];
        let by_waiters = rank(
            all.clone(),
            TopRequest {
                count: 3,
                by: By::Waiters,
            },
        );
        let keys: Vec<&[u8]> = by_waiters.iter().map(|e| e.key.as_slice()).collect();
        assert_eq!(keys, [&b"hot"[..], b"twin-b", b"warm"]);
        let by_held = rank(
            all,
            TopRequest {
                count: 10,
                by: By::Held,
            },
        );
        let keys: Vec<&[u8]> = by_held.iter().map(|e| e.key.as_slice()).collect();
        assert_eq!(keys, [&b"quiet"[..], b"twin-b", b"warm", b"hot"]);
    }
}
