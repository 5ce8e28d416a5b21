//! The fence clock: a node-wide hybrid clock that hands out strictly increasing fences.
//!
//! `next = max(last + 1, now_in_microseconds)`. The wall-clock term keeps fences rising
//! across everything that forgets `last` (restart without persistence, promotion of a
//! replica that missed writes); the `last + 1` term keeps them rising when grants come
//! faster than one per microsecond or the clock stalls. Pure: the caller passes `now`.

/// The largest fence: replies carry fences as RESP integers, which are signed 64-bit.
pub const MAX_FENCE: u64 = i64::MAX as u64;

/// Strictly increasing fence source, restorable from persisted or replicated fences.
#[derive(Debug, Default, Clone)]
pub struct FenceClock {
    last: u64,
}

impl FenceClock {
    /// A clock that has issued nothing yet.
    pub const fn new() -> Self {
        Self { last: 0 }
    }

    /// A clock whose highest fence issued or observed is `last` (as `last()` read it).
    pub const fn resumed(last: u64) -> Self {
        Self { last }
    }

    /// Issues the next fence. Never returns 0 and never repeats or goes down: once
    /// `MAX_FENCE` has been issued or observed there is no next fence (`None`), rather
    /// than a repeated one. (At one grant per microsecond that is 290,000 years away;
    /// only an administrator restoring an absurd fence can get there.)
    pub fn issue(&mut self, now_micros: u64) -> Option<u64> {
        let next = self.last.checked_add(1)?.max(now_micros).max(1);
        if next > MAX_FENCE {
            return None;
        }
        self.last = next;
        Some(next)
    }

    /// Records a fence issued elsewhere (loaded from disk or replicated) so that every
    /// later fence is greater than it.
    pub fn observe(&mut self, fence: u64) {
        self.last = self.last.max(fence);
    }

    /// The highest fence issued or observed so far.
    pub fn last(&self) -> u64 {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::{FenceClock, MAX_FENCE};

    #[test]
    fn follows_the_wall_clock_when_it_moves_forward() {
        let mut clock = FenceClock::new();
        assert_eq!(clock.issue(1_000), Some(1_000));
        assert_eq!(clock.issue(5_000), Some(5_000));
    }

    #[test]
    fn still_increases_when_the_clock_stalls_or_steps_back() {
        let mut clock = FenceClock::new();
        assert_eq!(clock.issue(1_000), Some(1_000));
        assert_eq!(clock.issue(1_000), Some(1_001));
        assert_eq!(clock.issue(10), Some(1_002));
    }

    #[test]
    fn observed_fences_push_later_ones_higher() {
        let mut clock = FenceClock::new();
        clock.observe(9_000_000);
        assert_eq!(clock.issue(1_000), Some(9_000_001));
        clock.observe(5);
        assert_eq!(clock.last(), 9_000_001);
    }

    #[test]
    fn a_resumed_clock_goes_on_from_where_it_was() {
        let mut clock = FenceClock::new();
        clock.issue(7_000);
        let mut resumed = FenceClock::resumed(clock.last());
        assert_eq!(resumed.issue(10), Some(7_001));
        assert_eq!(FenceClock::resumed(0).issue(0), Some(1));
    }

    #[test]
    fn never_issues_zero() {
        let mut clock = FenceClock::new();
        assert_eq!(clock.issue(0), Some(1));
    }

    #[test]
    fn stops_at_the_largest_fence_instead_of_repeating_it() {
        let mut clock = FenceClock::new();
        clock.observe(MAX_FENCE - 1);
        assert_eq!(clock.issue(0), Some(MAX_FENCE));
        assert_eq!(clock.issue(0), None);
        assert_eq!(
            clock.issue(u64::MAX),
            None,
            "a wild clock cannot go past it either"
        );
        assert_eq!(clock.last(), MAX_FENCE);
    }
}
