//! The checkers themselves can fail: each is shown a small hand-made history with the
//! anomaly it exists to catch (and the same history without it), so a silent checker
//! cannot pass the suite. No server is needed.

use std::collections::HashMap;

use crate::reliability::checker;
use crate::reliability::client::Sent;
use crate::reliability::durability;
use crate::reliability::durability::Found;
use crate::reliability::guarded::GuardedCounts;
use crate::reliability::history::{Mode, Op, Outcome, Request};

const MS: i64 = 1_000;

fn grant(client: usize, token: &str, fence: i64, from_ms: i64, to_ms: i64, ttl_ms: i64) -> Op {
    Op {
        client,
        key: "k".into(),
        request: Request::Acquire {
            ttl_ms,
            block_ms: None,
            mode: Mode::Exclusive,
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

/// `op` (a grant) asked for in `mode`.
fn in_mode(mode: Mode, mut op: Op) -> Op {
    if let Request::Acquire { mode: asked, .. } = &mut op.request {
        *asked = mode;
    }
    op
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
    assert_eq!(checker::holder_limits(&bad).len(), 1);
    // After A's lease ran out it is fine.
    let good = [
        grant(1, "a", 10, 0, 1, 100),
        grant(2, "b", 20, 150, 151, 100),
    ];
    assert!(checker::holder_limits(&good).is_empty());
    // A refresh stretches A's lease over B's grant.
    let refreshed = [
        grant(1, "a", 10, 0, 1, 100),
        refresh(1, "a", 90, 100, true),
        grant(2, "b", 20, 150, 151, 100),
    ];
    assert_eq!(checker::holder_limits(&refreshed).len(), 1);
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
    assert!(checker::holder_limits(&handed_over).is_empty());
}

#[test]
fn semaphore_checker_catches_one_holder_too_many() {
    let permit = |client, token, fence, from_ms| {
        in_mode(
            Mode::Limit(3),
            grant(client, token, fence, from_ms, from_ms + 1, 100),
        )
    };
    let full = [
        permit(1, "a", 10, 0),
        permit(2, "b", 20, 10),
        permit(3, "c", 30, 20),
    ];
    assert!(checker::holder_limits(&full).is_empty(), "3 of 3 is fine");
    // A fourth holder 30 ms in, while the three leases of 100 ms are all live.
    let mut over = full.to_vec();
    over.push(permit(4, "d", 40, 30));
    let anomalies = checker::holder_limits(&over);
    assert_eq!(anomalies.len(), 1, "{anomalies:?}");
    assert!(anomalies[0].contains("4 holders at once where 3 may hold"));
    let tally = checker::tally(&over);
    assert_eq!(tally.peaks.get(&Mode::Limit(3)), Some(&4));
    // After A's lease ran out the fourth takes its permit.
    let mut after = full.to_vec();
    after.push(permit(4, "d", 40, 150));
    assert!(checker::holder_limits(&after).is_empty());
    // A fourth whose grant was never acknowledged is not relied on.
    let mut unknown = permit(4, "d", 40, 30);
    unknown.outcome = Outcome::Unknown("connection lost".into());
    let mut maybe = full.to_vec();
    maybe.push(unknown);
    assert!(checker::holder_limits(&maybe).is_empty());
    // A semaphore that never filled up did not test its limit.
    assert!(checker::tally(&full).limits_untested().is_empty());
    assert_eq!(checker::tally(&full[..2]).limits_untested().len(), 1);
}

#[test]
fn read_write_checker_catches_a_writer_overlapping_a_reader() {
    let reader = |client, token, fence, from_ms| {
        in_mode(
            Mode::Shared,
            grant(client, token, fence, from_ms, from_ms + 1, 100),
        )
    };
    let readers = [reader(1, "r1", 10, 0), reader(2, "r2", 20, 10)];
    assert!(checker::holder_limits(&readers).is_empty(), "readers share");
    // A writer granted while the readers' leases are live.
    let mut writer_in = readers.to_vec();
    writer_in.push(grant(3, "w", 30, 50, 51, 100));
    assert_eq!(checker::holder_limits(&writer_in).len(), 1);
    // A reader granted during a writer's lease.
    let reader_in = [grant(3, "w", 10, 0, 1, 100), reader(1, "r1", 20, 50)];
    assert_eq!(checker::holder_limits(&reader_in).len(), 1);
    // The writer after both readers' leases ended.
    let mut writer_after = readers.to_vec();
    writer_after.push(grant(3, "w", 30, 150, 151, 100));
    assert!(checker::holder_limits(&writer_after).is_empty());
}

#[test]
fn request_checker_catches_a_wrong_mode_refusal() {
    let mut refused = grant(1, "a", 10, 0, 1, 100);
    refused.outcome = Outcome::Failed("WRONGMODE: k is a semaphore with limit 3".into());
    assert_eq!(checker::refused_requests(&[refused]).len(), 1);
    let mut readonly = grant(1, "a", 10, 0, 1, 100);
    readonly.outcome = Outcome::Failed("READONLY: You can't write against a replica".into());
    assert!(checker::refused_requests(&[readonly]).is_empty());
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

/// What a restart showed of key "k": its fence and deadline, and the fence each token
/// holds.
fn found(key: (Option<i64>, i64), holders: &[(&str, Option<i64>)]) -> Found {
    Found {
        keys: HashMap::from([("k".to_string(), key)]),
        holders: holders
            .iter()
            .map(|(token, fence)| (("k".to_string(), token.to_string()), *fence))
            .collect(),
    }
}

/// The durability verdict on `ops` for a crash at 1 s and `found` read at `read_ms`.
fn after_crash(ops: &[Op], found: &Found, read_ms: i64) -> durability::Judged {
    durability::losses(ops, 1_000 * MS, found, read_ms * MS)
}

#[test]
fn durability_checker_catches_a_lost_grant_and_a_lost_refresh() {
    // A lease acknowledged until at least 10 s, crash at 1 s, read back at 1.1 s.
    let ops = [grant(1, "a", 10, 0, 1, 10_000)];
    let read = |key, held| after_crash(&ops, &found(key, &[("a", held)]), 1_100);
    let judged = read((Some(10), 10_000), Some(10));
    assert!(judged.losses.is_empty());
    assert_eq!(judged.verified, 1);
    assert_eq!(read((None, -2), None).losses.len(), 1, "missing");
    assert_eq!(read((Some(10), 5_000), Some(10)).losses.len(), 1, "short");
    // Read back after the lease ended: absence is fine.
    let late = after_crash(&ops, &found((None, -2), &[("a", None)]), 20_000);
    assert!(late.losses.is_empty());
}

#[test]
fn durability_checker_catches_a_lost_shared_holder_and_an_old_one_back() {
    let permit = |client, token, fence, from_ms| {
        in_mode(
            Mode::Limit(3),
            grant(client, token, fence, from_ms, from_ms + 1, 10_000),
        )
    };
    let ops = [permit(1, "a", 10, 0), permit(2, "b", 20, 5)];
    let both = [("a", Some(10)), ("b", Some(20))];
    let judged = after_crash(&ops, &found((Some(20), 10_005), &both), 1_100);
    assert!(judged.losses.is_empty(), "{:?}", judged.losses);
    assert_eq!(judged.verified, 2);
    // The older holder kept, the newer one lost.
    let lost = [("a", Some(10)), ("b", None)];
    let judged = after_crash(&ops, &found((Some(10), 10_000), &lost), 1_100);
    assert_eq!(judged.losses.len(), 1, "{:?}", judged.losses);
    // The key's deadline must cover the latest holder's lease.
    let judged = after_crash(&ops, &found((Some(20), 10_000), &both), 1_100);
    assert_eq!(judged.losses.len(), 1, "{:?}", judged.losses);
    // A released reader back, older than a writer granted after it, and that writer lost.
    let mut released = refresh(1, "a", 100, 0, true);
    released.request = Request::Release { token: "a".into() };
    let ops = [
        in_mode(Mode::Shared, grant(1, "a", 10, 0, 1, 10_000)),
        released,
        grant(2, "w", 20, 200, 201, 10_000),
    ];
    let back = [("a", Some(10)), ("w", None)];
    let judged = after_crash(&ops, &found((Some(10), 10_000), &back), 1_100);
    assert_eq!(judged.losses.len(), 3, "{:?}", judged.losses);
}

/// A guarded write sent at `at_us` and answered 1 ms later with `reply`.
fn sent(reply: redis::RedisResult<redis::Value>, at_us: i64) -> Sent {
    Sent {
        reply,
        invoked_us: at_us,
        completed_us: at_us + 1_000,
        confirmed: true,
    }
}

fn timed_out() -> redis::RedisResult<redis::Value> {
    Err(redis::RedisError::from(std::io::Error::other("timed out")))
}

#[test]
fn guarded_counter_check_catches_a_lost_update_and_an_unexplained_one() {
    let counts = GuardedCounts::default();
    for value in 1..=5 {
        counts.record("k", value, &sent(Ok(redis::Value::Okay), value));
    }
    counts.record("k", 6, &sent(timed_out(), 6));
    assert!(
        counts.check(5).is_empty(),
        "all acknowledged writes counted"
    );
    assert!(counts.check(6).is_empty(), "the unknown write applied");
    assert_eq!(counts.check(4).len(), 1, "a stale write lost an update");
    assert_eq!(counts.check(7).len(), 1, "more writes than were sent");
    // Answered but not confirmed by a replica: it may be missing, or there.
    let mut unconfirmed = sent(Ok(redis::Value::Okay), 7);
    unconfirmed.confirmed = false;
    counts.record("k", 7, &unconfirmed);
    assert!(counts.check(5).is_empty() && counts.check(7).is_empty());
    assert_eq!(counts.check(8).len(), 1);
}

#[test]
fn guarded_crash_checks_catch_a_lost_write_and_a_stale_one() {
    let counts = GuardedCounts::default();
    let okay = || Ok(redis::Value::Okay);
    // Process 0 (killed at 10 ms): 1 and 2 acknowledged, 2 lost. Process 1: 2 again.
    counts.record("k", 1, &sent(okay(), 1_000));
    counts.record("k", 2, &sent(okay(), 5_000));
    counts.record("k", 2, &sent(okay(), 20_000));
    let restored = |value: i64| HashMap::from([("k".to_string(), value)]);
    let lost = counts.lost_in_crash(&restored(1), 0, (9_000, 10_000, 11_000));
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].window_us, 3_000, "acknowledged 6 ms, crash at 9 ms");
    assert!(counts
        .lost_in_crash(&restored(2), 0, (9_000, 10_000, 11_000))
        .is_empty());
    // A write sent to the restarted process before the reading: not judged.
    counts.record("k", 3, &sent(timed_out(), 10_500));
    assert!(counts
        .lost_in_crash(&restored(1), 0, (9_000, 10_000, 11_000))
        .is_empty());
    // One value twice across the crash is the lost write redone; within one process,
    // a stale write admitted.
    assert!(counts.stale_within_processes(&[10_000]).is_empty());
    assert_eq!(counts.stale_within_processes(&[30_000]).len(), 1);
}
