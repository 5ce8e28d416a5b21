//! The pure lock state machine: what a command does to a lock, decided without Redis.
//!
//! A lock exists only while held; Redis's key expiry is the lease, so a `Holding` here
//! is always a live one (Redis removes expired keys before we look). The functions take
//! the current holding (or none) and return *what happens*; the command layer applies
//! that to the key, replicates it and replies. Time comes in as arguments so the rules
//! are unit-tested with a fake clock.

use crate::fence::FenceClock;
pub use crate::holding::Holding;

/// The outcome of `LOCK.ACQUIRE`.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The lock was free: the caller holds it now, under a fresh fence.
    Granted { fence: u64 },
    /// The same token asked again: the lease restarts, the fence stays.
    Renewed { fence: u64 },
    /// Someone else holds it.
    Busy,
    /// The lock is free, but the fence clock has no fence left to issue.
    FencesExhausted,
}

/// Decides an acquire. `token` is the caller's chosen token, or the freshly generated one.
pub fn acquire(
    current: Option<&Holding>,
    token: &[u8],
    clock: &mut FenceClock,
    now_micros: u64,
) -> Acquire {
    match current {
        None => clock
            .issue(now_micros)
            .map_or(Acquire::FencesExhausted, |fence| Acquire::Granted { fence }),
        Some(held) if held.is_token(token) => Acquire::Renewed {
            fence: held.fence(),
        },
        Some(_) => Acquire::Busy,
    }
}

/// True when `token` is the live holder: the test behind REFRESH, RELEASE and FENCE.
pub fn is_holder(current: Option<&Holding>, token: &[u8]) -> bool {
    current.is_some_and(|held| held.is_token(token))
}

/// The fence `LOCK.FENCE` reports: the holder's, or only if `token` holds it.
pub fn visible_fence(current: Option<&Holding>, token: Option<&[u8]>) -> Option<u64> {
    let held = current?;
    match token {
        Some(token) if !held.is_token(token) => None,
        _ => Some(held.fence()),
    }
}

/// The absolute deadline (Unix ms) of a lease of `ttl_ms` starting at `now_ms`, or
/// `None` when the ttl is not positive, exceeds `max_ttl_ms`, or overflows.
pub fn lease_deadline(now_ms: i64, ttl_ms: i64, max_ttl_ms: i64) -> Option<i64> {
    if ttl_ms <= 0 || ttl_ms > max_ttl_ms {
        return None;
    }
    now_ms.checked_add(ttl_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(token: &str, fence: u64) -> Box<Holding> {
        Holding::pack(token.as_bytes(), fence).unwrap()
    }

    #[test]
    fn a_free_lock_is_granted_with_the_clock_fence() {
        let mut clock = FenceClock::new();
        let outcome = acquire(None, b"a", &mut clock, 1_000);
        assert_eq!(outcome, Acquire::Granted { fence: 1_000 });
    }

    #[test]
    fn a_held_lock_is_busy_for_another_token_and_changes_nothing() {
        let mut clock = FenceClock::new();
        let held = holding("a", 7);
        assert_eq!(acquire(Some(&held), b"b", &mut clock, 1_000), Acquire::Busy);
        assert_eq!(clock.last(), 0);
    }

    #[test]
    fn the_same_token_renews_with_the_original_fence() {
        let mut clock = FenceClock::new();
        let held = holding("a", 7);
        assert_eq!(
            acquire(Some(&held), b"a", &mut clock, 1_000),
            Acquire::Renewed { fence: 7 }
        );
        assert_eq!(clock.last(), 0, "a renewal issues no fence");
    }

    #[test]
    fn successive_grants_get_increasing_fences_even_with_a_frozen_clock() {
        let mut clock = FenceClock::new();
        let mut fences = Vec::new();
        for _ in 0..5 {
            if let Acquire::Granted { fence } = acquire(None, b"t", &mut clock, 42) {
                fences.push(fence);
            }
        }
        assert_eq!(fences, vec![42, 43, 44, 45, 46]);
    }

    #[test]
    fn a_free_lock_is_refused_when_no_fence_is_left() {
        let mut clock = FenceClock::new();
        clock.observe(crate::fence::MAX_FENCE);
        assert_eq!(
            acquire(None, b"a", &mut clock, 1_000),
            Acquire::FencesExhausted
        );
    }

    #[test]
    fn holder_checks_compare_whole_tokens() {
        let held = holding("abc", 3);
        assert!(is_holder(Some(&held), b"abc"));
        assert!(!is_holder(Some(&held), b"ab"));
        assert!(!is_holder(Some(&held), b"abcd"));
        assert!(!is_holder(None, b"abc"));
    }

    #[test]
    fn fence_is_visible_to_anyone_or_only_to_the_holder() {
        let held = holding("abc", 3);
        assert_eq!(visible_fence(Some(&held), None), Some(3));
        assert_eq!(visible_fence(Some(&held), Some(b"abc")), Some(3));
        assert_eq!(visible_fence(Some(&held), Some(b"xyz")), None);
        assert_eq!(visible_fence(None, None), None);
    }

    #[test]
    fn lease_deadlines_reject_bad_ttls() {
        assert_eq!(lease_deadline(1_000, 500, 10_000), Some(1_500));
        assert_eq!(lease_deadline(1_000, 0, 10_000), None);
        assert_eq!(lease_deadline(1_000, -5, 10_000), None);
        assert_eq!(lease_deadline(1_000, 10_001, 10_000), None);
        assert_eq!(lease_deadline(i64::MAX - 1, 5, i64::MAX), None);
    }
}
