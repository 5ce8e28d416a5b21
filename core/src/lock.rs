//! The pure lock state machine: what a command does to a lock, decided without Redis.
//!
//! A lock exists only while held; Redis's key expiry is the (latest) lease, so an
//! exclusive `Holding` here is always a live one (Redis removes expired keys before we
//! look). Shared holders carry their own leases, and one whose lease ended no longer
//! counts, even before it is removed. The functions take
//! the current holding (or none) and return *what happens*; the command layer applies
//! that to the key, replicates it and replies. Time comes in as arguments so the rules
//! are unit-tested with a fake clock.

use crate::error::CommandError;
use crate::fence_clock::FenceClock;
pub use crate::holding::Holding;
use crate::mode::Mode;
pub use crate::value::LockRef;

/// The outcome of `LOCK.ACQUIRE`.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The caller holds the lock now (alone, or with other shared holders), under a
    /// fresh fence.
    Granted { fence: u64 },
    /// The same token asked again in the same mode: its lease restarts, its fence stays.
    Renewed { fence: u64 },
    /// Held in a way that excludes the caller, full, or others queued first.
    Busy,
    /// The request's mode or limit differs from the lock's; carries what the lock is.
    WrongMode(Mode),
    /// The same token holds the lock under another session (or none).
    WrongSession,
    /// The lock would be granted, but the fence clock has no fence left to issue.
    FencesExhausted,
}

/// Whether a lock admits one more holder in some mode.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Admit,
    Busy,
    /// Shared holders in another shared mode (or limit) hold it: never admitted.
    WrongMode(Mode),
}

/// What `LOCK.ACQUIRE` asks for.
#[derive(Clone, Copy, Debug)]
pub struct AcquireRequest<'a> {
    /// The caller's chosen token, or the freshly generated one.
    pub token: &'a [u8],
    pub mode: Mode,
    /// `fencelock.max-holders`: the most holders a plain `SHARED` lock admits.
    pub max_holders: usize,
    /// Clients are queued for the lock: nobody may overtake them, whatever would fit.
    pub queued_before: bool,
    /// The token was generated for this request, so it holds nothing yet (no lookup).
    pub fresh_token: bool,
    /// The session the holding is to belong to.
    pub session: Option<&'a [u8]>,
}

/// Whether a lock in state `current` admits a new holder (another token) in `mode`.
/// An exclusive holder excludes everyone; shared holders admit shared holders of their
/// own mode up to their limit (`max_holders` for plain `SHARED`).
pub fn admits(current: Option<LockRef>, mode: Mode, max_holders: usize, now_ms: i64) -> Admission {
    let Some(current) = current else {
        return Admission::Admit;
    };
    // An exclusive holder, or a quarantine, excludes everyone.
    let LockRef::Shared(set) = current else {
        return Admission::Busy;
    };
    let held = set.mode();
    if mode == Mode::Exclusive {
        return Admission::Busy;
    }
    if mode != held {
        return Admission::WrongMode(held);
    }
    let capacity = match held {
        Mode::Semaphore(limit) => usize::try_from(limit).unwrap_or(usize::MAX),
        _ => max_holders,
    };
    if set.live_count(now_ms) >= capacity {
        Admission::Busy
    } else {
        Admission::Admit
    }
}

/// Whether `token`'s own shared holding ran out into its lock-delay and its room is
/// still quarantined. Such a token holds nothing, and is not let back in until that
/// room's quarantine ends: a grant now would either bring the expired holding (and its
/// fence) back, or end the quarantine early — the room is the old holding's, kept to its
/// end, as an exclusive lock's quarantine admits nobody. Once it ends, the token is
/// granted a new holding with a new fence, like any other.
pub fn quarantines_token(current: Option<LockRef>, token: &[u8], now_ms: i64) -> bool {
    let Some(LockRef::Shared(set)) = current else {
        return false;
    };
    set.has_lock_delays()
        && set
            .holder(token)
            .is_some_and(|holder| !holder.is_live(now_ms) && holder.occupies(now_ms))
}

/// Whether the first waiter, asking with `token` (its chosen one, if any) in `mode`, is
/// admitted: as `admits`, and never while the token's own room is quarantined
/// (`quarantines_token`).
pub fn admits_waiter(
    current: Option<LockRef>,
    token: Option<&[u8]>,
    mode: Mode,
    max_holders: usize,
    now_ms: i64,
) -> Admission {
    if token.is_some_and(|token| quarantines_token(current, token, now_ms)) {
        return Admission::Busy;
    }
    admits(current, mode, max_holders, now_ms)
}

/// What an acquire would do to one lock, before any fence is issued (an acquire of
/// several keys decides every key first, and issues fences only if all are granted).
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// A new holder: it needs a fresh fence.
    Admit,
    /// The same token holds it in this mode and session: its lease restarts.
    Renew {
        fence: u64,
    },
    Busy,
    WrongMode(Mode),
    WrongSession,
}

/// Decides an acquire's step. The same token renews in its own mode and session and is
/// refused in another (no upgrade or downgrade, no moving between sessions); a mode
/// mismatch is reported before contention.
pub fn step(current: Option<LockRef>, request: &AcquireRequest, now_ms: i64) -> Step {
    if !request.fresh_token && quarantines_token(current, request.token, now_ms) {
        return Step::Busy;
    }
    if let Some(held) = current.filter(|_| !request.fresh_token) {
        if let Some(holding) = held.holding_of(request.token, now_ms) {
            return if held.mode() != request.mode {
                Step::WrongMode(held.mode())
            } else if !holding.in_session(request.session) {
                Step::WrongSession
            } else {
                Step::Renew {
                    fence: holding.fence(),
                }
            };
        }
    }
    match admits(current, request.mode, request.max_holders, now_ms) {
        Admission::Admit if request.queued_before => Step::Busy,
        Admission::Admit => Step::Admit,
        Admission::Busy => Step::Busy,
        Admission::WrongMode(held) => Step::WrongMode(held),
    }
}

/// Decides an acquire, issuing the fence of a grant.
pub fn acquire(
    current: Option<LockRef>,
    request: &AcquireRequest,
    clock: &mut FenceClock,
    now_micros: u64,
    now_ms: i64,
) -> Acquire {
    match step(current, request, now_ms) {
        Step::Admit => issue(clock, now_micros),
        Step::Renew { fence } => Acquire::Renewed { fence },
        Step::Busy => Acquire::Busy,
        Step::WrongMode(held) => Acquire::WrongMode(held),
        Step::WrongSession => Acquire::WrongSession,
    }
}

/// A grant's fresh fence.
pub fn issue(clock: &mut FenceClock, now_micros: u64) -> Acquire {
    clock
        .issue(now_micros)
        .map_or(Acquire::FencesExhausted, |fence| Acquire::Granted { fence })
}

/// True when `token` is a live holder: the test behind REFRESH, RELEASE and GUARD.
pub fn is_holder(current: Option<LockRef>, token: &[u8], now_ms: i64) -> bool {
    current.is_some_and(|held| held.fence_of(token, now_ms).is_some())
}

/// The absolute deadline (Unix ms) of a lease of `ttl_ms` starting at `now_ms`, or
/// `None` when the ttl is not positive, exceeds `max_ttl_ms`, or overflows.
pub fn lease_deadline(now_ms: i64, ttl_ms: i64, max_ttl_ms: i64) -> Option<i64> {
    if ttl_ms <= 0 || ttl_ms > max_ttl_ms {
        return None;
    }
    now_ms.checked_add(ttl_ms)
}

/// When a lock next changes by itself: its key's expiry (an exclusive lock's lease, or
/// whatever `PEXPIRE` set), or, sooner, when its earliest shared holder has ended — a
/// holder holds through its deadline's millisecond, so one later.
pub fn next_change(key_expires_at: Option<i64>, earliest_holder: Option<i64>) -> Option<i64> {
    let holder_ends_at = earliest_holder.map(|deadline| deadline.saturating_add(1));
    match (key_expires_at, holder_ends_at) {
        (Some(key_at), Some(holder_at)) => Some(key_at.min(holder_at)),
        (key_at, holder_at) => key_at.or(holder_at),
    }
}

/// The lease a refresh of `ttl_ms` asks for: `ttl_ms` from now, or with `ADD` that much
/// beyond what is `remaining`; a permanent lock (`PERSIST`) stays permanent under `ADD`
/// (`Ok(None)`). An overflow is `InvalidExpire`.
pub fn refreshed_lease(
    remaining: Option<i64>,
    ttl_ms: i64,
    add: bool,
) -> Result<Option<i64>, CommandError> {
    match (add, remaining) {
        (false, _) => Ok(Some(ttl_ms)),
        (true, None) => Ok(None),
        (true, Some(remaining)) => remaining
            .checked_add(ttl_ms)
            .map(Some)
            .ok_or(CommandError::InvalidExpire("lock.refresh")),
    }
}

/// The deadline of a lease granted at `now_ms` to a waiter that asked for `ttl_ms` when
/// it queued (valid then): at most `max_ttl_ms` as it is now, since an operator who
/// lowered `max-ttl` meanwhile caps every lease that starts after that.
pub fn waiter_deadline(now_ms: i64, ttl_ms: i64, max_ttl_ms: i64) -> i64 {
    now_ms.saturating_add(ttl_ms.clamp(1, max_ttl_ms.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::SharedHolders;

    #[test]
    fn a_lock_next_changes_at_its_key_expiry_or_just_after_its_earliest_holder() {
        assert_eq!(next_change(Some(5_000), Some(1_000)), Some(1_001));
        assert_eq!(next_change(Some(900), Some(1_000)), Some(900));
        assert_eq!(next_change(None, Some(1_000)), Some(1_001));
        assert_eq!(next_change(Some(5_000), None), Some(5_000));
        assert_eq!(next_change(None, None), None);
        assert_eq!(next_change(None, Some(i64::MAX)), Some(i64::MAX));
    }

    #[test]
    fn a_refresh_restarts_or_adds_and_a_permanent_lock_stays_permanent() {
        assert_eq!(refreshed_lease(Some(300), 1_000, false), Ok(Some(1_000)));
        assert_eq!(refreshed_lease(None, 1_000, false), Ok(Some(1_000)));
        assert_eq!(refreshed_lease(Some(300), 1_000, true), Ok(Some(1_300)));
        assert_eq!(refreshed_lease(None, 1_000, true), Ok(None));
        assert_eq!(
            refreshed_lease(Some(i64::MAX), 1, true),
            Err(CommandError::InvalidExpire("lock.refresh"))
        );
    }

    #[test]
    fn a_waiters_lease_is_capped_by_the_max_ttl_at_its_grant() {
        assert_eq!(waiter_deadline(1_000, 500, 10_000), 1_500);
        assert_eq!(waiter_deadline(1_000, 60_000, 10_000), 11_000);
        assert_eq!(waiter_deadline(i64::MAX - 5, 500, 10_000), i64::MAX);
    }

    const MAX: usize = 10_000;

    fn holding(token: &str, fence: u64) -> Box<Holding> {
        Holding::pack(token.as_bytes(), fence).unwrap()
    }

    fn request(token: &str, mode: Mode) -> AcquireRequest<'_> {
        AcquireRequest {
            token: token.as_bytes(),
            mode,
            max_holders: MAX,
            queued_before: false,
            fresh_token: false,
            session: None,
        }
    }

    fn shared(mode: Mode, holders: &[(&str, u64, i64)]) -> Box<SharedHolders> {
        let mut set = SharedHolders::new(mode);
        for (token, fence, deadline) in holders {
            set.put(holding(token, *fence), *deadline).unwrap();
        }
        set
    }

    #[test]
    fn a_free_lock_is_granted_with_the_clock_fence() {
        let mut clock = FenceClock::new();
        let outcome = acquire(None, &request("a", Mode::Exclusive), &mut clock, 1_000, 0);
        assert_eq!(outcome, Acquire::Granted { fence: 1_000 });
    }

    #[test]
    fn a_held_lock_is_busy_for_another_token_and_changes_nothing() {
        let mut clock = FenceClock::new();
        let held = holding("a", 7);
        let current = Some(LockRef::Exclusive(&held));
        for mode in [Mode::Exclusive, Mode::Shared, Mode::Semaphore(3)] {
            assert_eq!(
                acquire(current, &request("b", mode), &mut clock, 1_000, 0),
                Acquire::Busy
            );
        }
        assert_eq!(clock.last(), 0);
    }

    #[test]
    fn the_same_token_renews_with_the_original_fence() {
        let mut clock = FenceClock::new();
        let held = holding("a", 7);
        assert_eq!(
            acquire(
                Some(LockRef::Exclusive(&held)),
                &request("a", Mode::Exclusive),
                &mut clock,
                1_000,
                0
            ),
            Acquire::Renewed { fence: 7 }
        );
        assert_eq!(clock.last(), 0, "a renewal issues no fence");
    }

    #[test]
    fn the_same_token_in_another_mode_is_refused_with_what_it_holds() {
        let mut clock = FenceClock::new();
        let held = holding("a", 7);
        assert_eq!(
            acquire(
                Some(LockRef::Exclusive(&held)),
                &request("a", Mode::Shared),
                &mut clock,
                1,
                0
            ),
            Acquire::WrongMode(Mode::Exclusive)
        );
        let set = shared(Mode::Semaphore(2), &[("a", 3, 100)]);
        let current = Some(LockRef::Shared(&set));
        assert_eq!(
            acquire(current, &request("a", Mode::Exclusive), &mut clock, 1, 0),
            Acquire::WrongMode(Mode::Semaphore(2))
        );
        assert_eq!(
            acquire(current, &request("a", Mode::Semaphore(2)), &mut clock, 1, 0),
            Acquire::Renewed { fence: 3 }
        );
    }

    #[test]
    fn the_same_token_in_another_session_is_refused() {
        let mut clock = FenceClock::new();
        let in_session = crate::holding::Extras {
            session: Some(b"s1"),
            lock_delay_ms: 0,
            value: None,
        };
        let held = Holding::pack_with(b"a", 7, in_session).unwrap();
        let current = Some(LockRef::Exclusive(&held));
        let mut ask = request("a", Mode::Exclusive);
        assert_eq!(
            acquire(current, &ask, &mut clock, 1, 0),
            Acquire::WrongSession,
            "no session asked, one held"
        );
        ask.session = Some(b"s2");
        assert_eq!(
            acquire(current, &ask, &mut clock, 1, 0),
            Acquire::WrongSession
        );
        ask.session = Some(b"s1");
        assert_eq!(
            acquire(current, &ask, &mut clock, 1, 0),
            Acquire::Renewed { fence: 7 }
        );
        let plain = holding("a", 7);
        assert_eq!(
            acquire(Some(LockRef::Exclusive(&plain)), &ask, &mut clock, 1, 0),
            Acquire::WrongSession,
            "a session asked, none held"
        );
        assert_eq!(clock.last(), 0);
    }

    #[test]
    fn a_semaphore_admits_up_to_its_limit_of_live_holders() {
        let mut clock = FenceClock::new();
        let set = shared(Mode::Semaphore(2), &[("a", 1, 100), ("b", 2, 200)]);
        let current = Some(LockRef::Shared(&set));
        let ask = request("c", Mode::Semaphore(2));
        assert_eq!(acquire(current, &ask, &mut clock, 10, 100), Acquire::Busy);
        assert_eq!(
            acquire(current, &ask, &mut clock, 10, 101),
            Acquire::Granted { fence: 10 },
            "a's lease ended: its permit is free"
        );
    }

    #[test]
    fn modes_and_limits_belong_to_the_lock_while_held() {
        let mut clock = FenceClock::new();
        let semaphore = shared(Mode::Semaphore(5), &[("a", 1, 100)]);
        let readers = shared(Mode::Shared, &[("a", 1, 100)]);
        let cases = [
            (
                &semaphore,
                Mode::Shared,
                Acquire::WrongMode(Mode::Semaphore(5)),
            ),
            (
                &semaphore,
                Mode::Semaphore(4),
                Acquire::WrongMode(Mode::Semaphore(5)),
            ),
            (&semaphore, Mode::Exclusive, Acquire::Busy),
            (
                &readers,
                Mode::Semaphore(5),
                Acquire::WrongMode(Mode::Shared),
            ),
            (&readers, Mode::Exclusive, Acquire::Busy),
            (&readers, Mode::Shared, Acquire::Granted { fence: 50 }),
        ];
        for (set, mode, expected) in cases {
            let outcome = acquire(
                Some(LockRef::Shared(set)),
                &request("b", mode),
                &mut clock,
                50,
                0,
            );
            assert_eq!(outcome, expected, "{mode:?} on {:?}", set.mode());
        }
    }

    #[test]
    fn nobody_overtakes_the_queue_but_a_mode_mismatch_is_still_reported() {
        let mut clock = FenceClock::new();
        let readers = shared(Mode::Shared, &[("a", 1, 100)]);
        let current = Some(LockRef::Shared(&readers));
        let mut ask = request("b", Mode::Shared);
        ask.queued_before = true;
        assert_eq!(acquire(current, &ask, &mut clock, 5, 0), Acquire::Busy);
        assert_eq!(acquire(None, &ask, &mut clock, 5, 0), Acquire::Busy);
        ask.mode = Mode::Semaphore(2);
        assert_eq!(
            acquire(current, &ask, &mut clock, 5, 0),
            Acquire::WrongMode(Mode::Shared)
        );
        let mut renew = request("a", Mode::Shared);
        renew.queued_before = true;
        assert_eq!(
            acquire(current, &renew, &mut clock, 5, 0),
            Acquire::Renewed { fence: 1 },
            "a holder's own retry is not an overtake"
        );
    }

    fn delayed(token: &str, fence: u64) -> Box<Holding> {
        let extras = crate::holding::Extras {
            session: None,
            lock_delay_ms: 1_000,
            value: None,
        };
        Holding::pack_with(token.as_bytes(), fence, extras).unwrap()
    }

    #[test]
    fn an_expired_shared_token_is_busy_until_its_quarantine_ends() {
        let mut clock = FenceClock::new();
        let mut set = SharedHolders::new(Mode::Shared);
        set.put(delayed("r", 3), 100).unwrap();
        let current = Some(LockRef::Shared(&set));
        let ask = request("r", Mode::Shared);
        assert_eq!(
            acquire(current, &ask, &mut clock, 10, 100),
            Acquire::Renewed { fence: 3 },
            "still live: a renewal"
        );
        for now in [101, 1_100] {
            assert_eq!(acquire(current, &ask, &mut clock, 10, now), Acquire::Busy);
            assert_eq!(
                admits_waiter(current, Some(b"r"), Mode::Shared, MAX, now),
                Admission::Busy
            );
        }
        assert_eq!(
            acquire(current, &request("x", Mode::Shared), &mut clock, 10, 101),
            Acquire::Granted { fence: 10 },
            "another reader fits beside the quarantined room"
        );
        assert_eq!(
            admits_waiter(current, None, Mode::Shared, MAX, 101),
            Admission::Admit
        );
        assert!(!quarantines_token(current, b"r", 1_101), "the room is free");
        let mut semaphore = SharedHolders::new(Mode::Semaphore(2));
        semaphore.put(delayed("a", 4), 100).unwrap();
        let current = Some(LockRef::Shared(&semaphore));
        assert_eq!(
            acquire(
                current,
                &request("a", Mode::Semaphore(2)),
                &mut clock,
                20,
                500
            ),
            Acquire::Busy
        );
    }

    #[test]
    fn plain_shared_locks_are_capped_at_max_holders() {
        let set = shared(Mode::Shared, &[("a", 1, 100), ("b", 2, 100)]);
        let current = Some(LockRef::Shared(&set));
        assert_eq!(admits(current, Mode::Shared, 2, 0), Admission::Busy);
        assert_eq!(admits(current, Mode::Shared, 3, 0), Admission::Admit);
    }

    #[test]
    fn successive_grants_get_increasing_fences_even_with_a_frozen_clock() {
        let mut clock = FenceClock::new();
        let mut fences = Vec::new();
        for _ in 0..5 {
            if let Acquire::Granted { fence } =
                acquire(None, &request("t", Mode::Shared), &mut clock, 42, 0)
            {
                fences.push(fence);
            }
        }
        assert_eq!(fences, vec![42, 43, 44, 45, 46]);
    }

    #[test]
    fn a_free_lock_is_refused_when_no_fence_is_left() {
        let mut clock = FenceClock::new();
        clock.observe(crate::fence_clock::MAX_FENCE);
        assert_eq!(
            acquire(None, &request("a", Mode::Exclusive), &mut clock, 1_000, 0),
            Acquire::FencesExhausted
        );
    }

    #[test]
    fn holder_checks_compare_whole_tokens_and_skip_ended_leases() {
        let held = holding("abc", 3);
        let current = Some(LockRef::Exclusive(&held));
        assert!(is_holder(current, b"abc", 0));
        assert!(!is_holder(current, b"ab", 0));
        assert!(!is_holder(current, b"abcd", 0));
        assert!(!is_holder(None, b"abc", 0));
        let set = shared(Mode::Shared, &[("r", 1, 100)]);
        assert!(is_holder(Some(LockRef::Shared(&set)), b"r", 100));
        assert!(!is_holder(Some(LockRef::Shared(&set)), b"r", 101));
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
