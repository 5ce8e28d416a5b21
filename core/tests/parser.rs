//! Property tests of the argument parser (`fencelock_core::args`) against independent
//! models of Redis's rules; `make fuzz` runs them with many cases (`PROPTEST_CASES`).

use fencelock_core::args::{parse_integer, parse_options, parse_timeout, parse_token, parse_ttl};
use fencelock_core::error::CommandError;
use fencelock_core::limits::Limits;
use proptest::prelude::*;

/// Redis's `string2ll`, written from its rules: optional '-', digits, no leading zero
/// (except "0" itself), no "-0", within i64.
fn model_integer(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let shape = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && text != "-0";
    shape.then(|| text.parse::<i64>().ok()).flatten()
}

/// Bytes that look like numbers often, and like anything else sometimes.
fn numberish() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        any::<u64>().prop_map(|n| format!("{n}0").into_bytes()),
        "[-+ 0]{0,2}[0-9]{0,21}[ .e]?[0-9]{0,2}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

proptest! {
    #[test]
    fn integers_parse_exactly_as_redis_does(bytes in numberish()) {
        prop_assert_eq!(parse_integer(&bytes).ok(), model_integer(&bytes));
        if model_integer(&bytes).is_none() {
            prop_assert_eq!(parse_integer(&bytes), Err(CommandError::NotAnInteger));
        }
    }

    #[test]
    fn every_i64_round_trips(n in any::<i64>()) {
        prop_assert_eq!(parse_integer(n.to_string().as_bytes()), Ok(n));
    }

    #[test]
    fn ttls_are_positive_and_within_the_maximum(bytes in numberish()) {
        let expected = match model_integer(&bytes) {
            None => Err(CommandError::NotAnInteger),
            Some(n) if n <= 0 || n > Limits::default().max_ttl_ms => {
                Err(CommandError::InvalidExpire("lock.acquire"))
            }
            Some(n) => Ok(n),
        };
        prop_assert_eq!(parse_ttl(&bytes, "lock.acquire", Limits::default().max_ttl_ms), expected);
    }

    #[test]
    fn timeouts_are_non_negative_integers_that_fit_the_clock(bytes in numberish()) {
        // BLPOP's rule: the timeout is added to the clock in ms and must not overflow.
        let expected = match model_integer(&bytes) {
            None => Err(CommandError::NotAnInteger),
            Some(n) if n < 0 => Err(CommandError::NegativeTimeout),
            Some(n) if n > i64::MAX / 2 => Err(CommandError::TimeoutOutOfRange),
            Some(n) => Ok(n),
        };
        prop_assert_eq!(parse_timeout(&bytes), expected);
    }

    #[test]
    fn tokens_are_non_empty_and_bounded(token in proptest::collection::vec(any::<u8>(), 0..300)) {
        let valid = !token.is_empty() && token.len() <= Limits::default().max_token_length;
        match parse_token(&token, Limits::default().max_token_length) {
            Ok(accepted) => prop_assert!(valid && accepted == token.as_slice()),
            Err(error) => prop_assert!(!valid && error == CommandError::InvalidToken),
        }
    }

    #[test]
    fn options_are_known_pairs_each_given_once(
        args in proptest::collection::vec(
            prop_oneof![
                Just(b"TOKEN".to_vec()), Just(b"token".to_vec()), Just(b"BlOcK".to_vec()),
                Just(b"PXAT".to_vec()), proptest::collection::vec(any::<u8>(), 0..6),
            ],
            0..7,
        )
    ) {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let parsed = parse_options(&refs, ["TOKEN", "BLOCK"]);
        // The model: walk name/value pairs; a name must be known and unseen.
        let mut seen: [Option<&[u8]>; 2] = [None, None];
        let mut valid = refs.len().is_multiple_of(2);
        for pair in refs.chunks(2).filter(|pair| pair.len() == 2) {
            let slot = ["TOKEN", "BLOCK"]
                .iter()
                .position(|name| pair[0].eq_ignore_ascii_case(name.as_bytes()));
            match slot {
                Some(slot) if seen[slot].is_none() => seen[slot] = Some(pair[1]),
                _ => valid = false,
            }
        }
        if valid {
            prop_assert_eq!(parsed, Ok(seen));
        } else {
            prop_assert_eq!(parsed, Err(CommandError::Syntax));
        }
    }
}
