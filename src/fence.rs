//! The fence clock: a node-wide hybrid clock that hands out strictly increasing fences.
//!
//! `next = max(last + 1, now_in_microseconds)`. The wall-clock term keeps fences rising
//! across everything that forgets `last` (restart without persistence, promotion of a
//! replica that missed writes); the `last + 1` term keeps them rising when grants come
//! faster than one per microsecond or the clock stalls. Pure: the caller passes `now`.

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

    /// Issues the next fence. Never returns 0 and never repeats or goes down.
    pub fn issue(&mut self, now_micros: u64) -> u64 {
        let next = self.last.saturating_add(1).max(now_micros).max(1);
        self.last = next;
        next
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
    use super::FenceClock;

    #[test]
    fn follows_the_wall_clock_when_it_moves_forward() {
        let mut clock = FenceClock::new();
        assert_eq!(clock.issue(1_000), 1_000);
        assert_eq!(clock.issue(5_000), 5_000);
    }

    #[test]
    fn still_increases_when_the_clock_stalls_or_steps_back() {
        let mut clock = FenceClock::new();
        assert_eq!(clock.issue(1_000), 1_000);
        assert_eq!(clock.issue(1_000), 1_001);
        assert_eq!(clock.issue(10), 1_002);
    }

    #[test]
    fn observed_fences_push_later_ones_higher() {
        let mut clock = FenceClock::new();
        clock.observe(9_000_000);
        assert_eq!(clock.issue(1_000), 9_000_001);
        clock.observe(5);
        assert_eq!(clock.last(), 9_000_001);
    }

    #[test]
    fn never_issues_zero_and_saturates_instead_of_wrapping() {
        let mut clock = FenceClock::new();
        assert_eq!(clock.issue(0), 1);
        clock.observe(u64::MAX);
        assert_eq!(clock.issue(0), u64::MAX);
    }
}
