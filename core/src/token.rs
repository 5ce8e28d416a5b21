//! Lock tokens: generation from a CSPRNG, validation, and constant-time comparison.

use rand::RngCore;

/// Random bytes in a generated token: 128 bits, printed as 32 lowercase hex characters.
pub const GENERATED_TOKEN_BYTES: usize = 16;

/// A token generated for one grant: its random bytes and their hex spelling, both on
/// the stack. A grant stores the bytes as they are (`Holding::pack_generated`) and
/// replies with the hex, so it neither allocates for its token nor decodes the hex it
/// has just encoded (that decode was the largest cost a grant had over a bare module
/// command doing the same key work).
#[derive(Clone, Copy)]
pub struct Generated {
    raw: [u8; GENERATED_TOKEN_BYTES],
    hex: [u8; GENERATED_TOKEN_BYTES * 2],
}

impl Generated {
    /// A fresh unguessable token. `ThreadRng` is a CSPRNG seeded and reseeded from the OS.
    pub fn fresh() -> Self {
        let mut raw = [0u8; GENERATED_TOKEN_BYTES];
        rand::thread_rng().fill_bytes(&mut raw);
        let mut hex = [0u8; GENERATED_TOKEN_BYTES * 2];
        write_hex(&raw, &mut hex);
        Self { raw, hex }
    }

    /// The token as clients see it: 32 lowercase hex characters.
    pub fn hex(&self) -> &[u8] {
        &self.hex
    }

    /// The 16 random bytes, as `compact` would decode them from `hex`.
    pub fn raw(&self) -> &[u8; GENERATED_TOKEN_BYTES] {
        &self.raw
    }
}

/// A fresh unguessable token, as its hex spelling (for where the token must outlive
/// the grant, such as a waiter's reply sent later).
pub fn generate() -> Vec<u8> {
    Generated::fresh().hex().to_vec()
}

const HEX: [u8; 16] = *b"0123456789abcdef";

/// Lowercase hex spelling of `raw`.
pub fn to_hex(raw: &[u8]) -> Vec<u8> {
    let mut printable = vec![0u8; raw.len() * 2];
    write_hex(raw, &mut printable);
    printable
}

/// Writes the hex spelling of `raw` into `printable` (twice its length).
fn write_hex(raw: &[u8], printable: &mut [u8]) {
    for (pair, &byte) in printable.chunks_exact_mut(2).zip(raw) {
        if let [high, low] = pair {
            *high = HEX[usize::from(byte >> 4)];
            *low = HEX[usize::from(byte & 0x0f)];
        }
    }
}

/// The 16 raw bytes behind a token spelled exactly as `generate` spells them (32
/// lowercase hex characters), or `None` for any other token.
pub fn compact(token: &[u8]) -> Option<[u8; GENERATED_TOKEN_BYTES]> {
    if token.len() != GENERATED_TOKEN_BYTES * 2 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut raw = [0u8; GENERATED_TOKEN_BYTES];
    for (byte, pair) in raw.iter_mut().zip(token.chunks_exact(2)) {
        let &[high, low] = pair else { return None };
        *byte = (nibble(high)? << 4) | nibble(low)?;
    }
    Some(raw)
}

/// A client-chosen token is valid when it is non-empty and at most `max_len` bytes.
pub fn is_valid(token: &[u8], max_len: usize) -> bool {
    !token.is_empty() && token.len() <= max_len
}

/// Compares tokens without an early exit on the first differing byte, so response time
/// does not reveal how much of a guessed token was right.
pub fn tokens_match(held: &[u8], offered: &[u8]) -> bool {
    if held.len() != offered.len() {
        return false;
    }
    // Eight bytes at a time, every byte always looked at: a holder's token is compared
    // with every offered one (a shared lock compares it with each of its holders), so
    // the comparison is kept cheap as well as free of early exits.
    let (held_words, held_rest) = held.as_chunks::<8>();
    let (offered_words, offered_rest) = offered.as_chunks::<8>();
    let words = held_words
        .iter()
        .zip(offered_words)
        .fold(0u64, |acc, (a, b)| {
            acc | (u64::from_ne_bytes(*a) ^ u64::from_ne_bytes(*b))
        });
    let rest = held_rest
        .iter()
        .zip(offered_rest)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(words | u64::from(rest)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn generated_tokens_are_32_hex_chars_and_distinct() {
        let tokens: HashSet<Vec<u8>> = (0..1_000).map(|_| generate()).collect();
        assert_eq!(tokens.len(), 1_000);
        for token in &tokens {
            assert_eq!(token.len(), 32);
            assert!(token.iter().all(|c| c.is_ascii_hexdigit()));
        }
    }

    #[test]
    fn validity_bounds() {
        assert!(!is_valid(b"", 256));
        assert!(is_valid(b"x", 256));
        assert!(is_valid(&[b'x'; 256], 256));
        assert!(!is_valid(&[b'x'; 257], 256));
    }

    #[test]
    fn matching_is_exact() {
        assert!(tokens_match(b"abc", b"abc"));
        assert!(!tokens_match(b"abc", b"abd"));
        assert!(!tokens_match(b"abc", b"abcd"));
        assert!(tokens_match(b"", b""));
        let long = b"0123456789abcdef0123456789abcdef-x";
        for at in 0..long.len() {
            let mut other = *long;
            other[at] ^= 1;
            assert!(!tokens_match(long, &other), "a difference at byte {at}");
        }
        assert!(tokens_match(long, &long.clone()));
    }
}
