//! The checkers themselves can fail: each is shown a small hand-made history with the
//! anomaly it exists to catch (and the same history without it), so a silent checker
//! cannot pass the suite. No server is needed.

use std::collections::HashMap;

use crate::reliability::checker;
use crate::reliability::durability;
use crate::reliability::history::{Op, Outcome, Request};

const MS: i64 = 1_000;

fn grant(client: usize, token: &str, fence: i64, from_ms: i64, to_ms: i64, ttl_ms: i64) -> Op {
    Op {
        client,
        key: "k".into(),
        request: Request::Acquire {
            ttl_ms,
            block_ms: None,
        },
        invoked_us: from_ms * MS,
        completed_us: to_ms * MS,
        outcome: Outcome::Granted {
            token: token.into(),
            fence,
        },
        node: 0,
        confirmed: true,
    }
}

fn refresh(client: usize, token: &str, at_ms: i64, ttl_ms: i64, ok: bool) -> Op {
    Op {
        client,
        key: "k".into(),
        request: Request::Refresh {
            token: token.into(),
            ttl_ms,
        },
        invoked_us: at_ms * MS,
        completed_us: (at_ms + 1) * MS,
        outcome: Outcome::Done(ok),
        node: 0,
        confirmed: true,
    }
}

#[test]
fn fence_checker_catches_a_fence_that_went_down() {
    let good = [grant(1, "a", 10, 0, 1, 100), grant(2, "b", 20, 5, 6, 100)];
    assert!(checker::fences_increase(&good).is_empty());
    let bad = [grant(1, "a", 20, 0, 1, 100), grant(2, "b", 10, 5, 6, 100)];
    assert_eq!(checker::fences_increase(&bad).len(), 1);
    let repeated = [grant(1, "a", 10, 0, 1, 100), grant(2, "b", 10, 5, 6, 100)];
    assert!(!checker::fences_increase(&repeated).is_empty());
}

#[test]
fn mutual_exclusion_checker_catches_two_live_leases() {
    // B is granted 50 ms into A's 100 ms lease.
    let bad = [grant(1, "a", 10, 0, 1, 100), grant(2, "b", 20, 50, 51, 100)];
    assert_eq!(checker::mutual_exclusion(&bad).len(), 1);
    // After A's lease ran out it is fine.
    let good = [
        grant(1, "a", 10, 0, 1, 100),
        grant(2, "b", 20, 150, 151, 100),
    ];
    assert!(checker::mutual_exclusion(&good).is_empty());
    // A refresh stretches A's lease over B's grant.
    let refreshed = [
        grant(1, "a", 10, 0, 1, 100),
        refresh(1, "a", 90, 100, true),
        grant(2, "b", 20, 150, 151, 100),
    ];
    assert_eq!(checker::mutual_exclusion(&refreshed).len(), 1);
    // A release sent (even one whose outcome is unknown) ends the holder's claim.
    let mut released = refresh(1, "a", 120, 0, true);
    released.request = Request::Release { token: "a".into() };
    released.outcome = Outcome::Unknown("connection lost".into());
    let handed_over = [
        grant(1, "a", 10, 0, 1, 100),
        refresh(1, "a", 90, 100, true),
        released,
        grant(2, "b", 20, 150, 151, 100),
    ];
    assert!(checker::mutual_exclusion(&handed_over).is_empty());
}

#[test]
fn revival_checker_catches_a_refresh_after_the_deadline() {
    let bad = [
        grant(1, "a", 10, 0, 1, 100),
        refresh(1, "a", 300, 100, true),
    ];
    assert_eq!(checker::no_revival(&bad).len(), 1);
    let refused = [
        grant(1, "a", 10, 0, 1, 100),
        refresh(1, "a", 300, 100, false),
    ];
    assert!(checker::no_revival(&refused).is_empty());
}

#[test]
fn durability_checker_catches_a_lost_grant_and_a_lost_refresh() {
    // A lease acknowledged until at least 10 s, crash at 1 s, read back at 1.1 s.
    let ops = [grant(1, "a", 10, 0, 1, 10_000)];
    let found = |state| HashMap::from([("k".to_string(), state)]);
    let judged = durability::losses(&ops, 1_000 * MS, &found(Some((10, 10_000))), 1_100 * MS);
    assert!(judged.losses.is_empty());
    assert_eq!(judged.verified, 1);
    let missing = durability::losses(&ops, 1_000 * MS, &found(None), 1_100 * MS);
    assert_eq!(missing.losses.len(), 1);
    let short = durability::losses(&ops, 1_000 * MS, &found(Some((10, 5_000))), 1_100 * MS);
    assert_eq!(short.losses.len(), 1);
    // Read back after the lease ended: absence is fine.
    let late = durability::losses(&ops, 1_000 * MS, &found(None), 20_000 * MS);
    assert!(late.losses.is_empty());
}

#[test]
fn guarded_counter_check_catches_a_lost_update_and_an_unexplained_one() {
    use crate::reliability::guarded::GuardedCounts;
    let counts = GuardedCounts::default();
    for _ in 0..5 {
        counts.record(&Ok(redis::Value::Okay));
    }
    counts.record(&Err(redis::RedisError::from(std::io::Error::other(
        "timed out",
    ))));
    assert!(
        counts.check(5).is_empty(),
        "all acknowledged writes counted"
    );
    assert!(counts.check(6).is_empty(), "the unknown write applied");
    assert_eq!(counts.check(4).len(), 1, "a stale write lost an update");
    assert_eq!(counts.check(7).len(), 1, "more writes than were sent");
}
