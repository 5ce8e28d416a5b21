//! `LOCK.TOP [COUNT n] [BY waiters|held]`: its arguments and the order of its entries
//! (`[key, waiters, longest-wait-ms, held-ms]`). Pure: the module gathers the entries
//! from the keys it keeps track of (held or waited for) and ranks them here.

use std::cmp::{Ordering, Reverse};

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
    /// How long the first of them has waited, µs (0 without waiters; shown in ms).
    pub longest_wait_us: u64,
    /// How long the current holding has lasted, µs: a shared lock's oldest holder's
    /// (0 without a holder; shown in ms).
    pub held_us: u64,
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

/// How two entries compare in the order asked for: by waiters, then the longest wait,
/// then the longest holding; by holding, then waiters, then the longest wait; the key's
/// name last. Durations compare in µs, not in the ms shown: two keys whose ages share
/// a millisecond keep their order from one call to the next, as their ages grow
/// together.
pub fn compare(by: By, a: &Entry, b: &Entry) -> Ordering {
    match by {
        By::Waiters => (
            Reverse(a.waiters),
            Reverse(a.longest_wait_us),
            Reverse(a.held_us),
            &a.key,
        )
            .cmp(&(
                Reverse(b.waiters),
                Reverse(b.longest_wait_us),
                Reverse(b.held_us),
                &b.key,
            )),
        By::Held => (
            Reverse(a.held_us),
            Reverse(a.waiters),
            Reverse(a.longest_wait_us),
            &a.key,
        )
            .cmp(&(
                Reverse(b.held_us),
                Reverse(b.waiters),
                Reverse(b.longest_wait_us),
                &b.key,
            )),
    }
}

/// The first `count` of `entries` in the order asked for (`compare`): a selection of
/// the first `count`, then a sort of those alone, so the cost is what `COUNT` needs
/// (O(n + count log count)), not a sort of everything.
pub fn rank(mut entries: Vec<Entry>, request: TopRequest) -> Vec<Entry> {
    let order = |a: &Entry, b: &Entry| compare(request.by, a, b);
    if request.count < entries.len() {
        entries.select_nth_unstable_by(request.count, order);
        entries.truncate(request.count);
    }
    entries.sort_unstable_by(order);
    entries
}

/// Whether `ranked` (a `rank` of some of the keys) is the listing of all of them, when
/// every key left out holds nobody's wait and has held no longer than `boundary`'s
/// age, or as long but with a later name — `boundary` being `(age µs, name)` of the
/// last key looked at, with the keys not looked at ordered after it: then none of them
/// could come before the last entry listed.
pub fn settled(ranked: &[Entry], request: TopRequest, boundary: (u64, &[u8])) -> bool {
    let (held_us, key) = boundary;
    let boundary = Entry {
        key: key.to_vec(),
        waiters: 0,
        longest_wait_us: 0,
        held_us,
    };
    ranked.len() >= request.count
        && ranked
            .last()
            .is_some_and(|last| compare(request.by, last, &boundary) != Ordering::Greater)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, waiters: usize, longest_wait_us: u64, held_us: u64) -> Entry {
        Entry {
            key: key.as_bytes().to_vec(),
            waiters,
            longest_wait_us,
            held_us,
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

    #[test]
    fn a_listing_is_settled_only_when_no_key_left_out_could_come_before_its_last() {
        let request = TopRequest {
            count: 2,
            by: By::Held,
        };
        let ranked = vec![entry("old", 0, 0, 900), entry("mid", 0, 0, 500)];
        assert!(
            settled(&ranked, request, (500, b"mid")),
            "the boundary itself"
        );
        assert!(settled(&ranked, request, (400, b"a")));
        assert!(
            !settled(&ranked, request, (500, b"b")),
            "b could come before mid"
        );
        assert!(!settled(&ranked, request, (600, b"z")));
        assert!(
            !settled(&ranked[..1], request, (10, b"z")),
            "fewer than COUNT"
        );
        let by_waiters = TopRequest {
            count: 2,
            by: By::Waiters,
        };
        let ranked = vec![entry("hot", 3, 10, 0), entry("held", 0, 0, 500)];
        assert!(settled(&ranked, by_waiters, (500, b"held")));
        assert!(!settled(&ranked, by_waiters, (501, b"a")));
    }
}
