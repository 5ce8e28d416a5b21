//! The checkers themselves can fail: each is shown a small hand-made history with the
//! anomaly it exists to catch (and the same history without it), so a silent checker
//! cannot pass the suite; sessions too (a lease kept alive, lost, cut short by a
//! lock-delay granted away, revived, counted twice; `LOCK.HELD` after a restart). No
//! server is needed.

use std::collections::HashMap;

use crate::reliability::checker;
use crate::reliability::client::Sent;
use crate::reliability::durability;
use crate::reliability::durability::{Found, HeldFound, Listed};
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
    if let Request::Acquire { mode: asked, .. } | Request::SessionAcquire { mode: asked, .. } =
        &mut op.request
    {
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

/// A grant of several keys at once (`LOCK.ACQUIREALL`, one op per key) is judged key by
/// key like any other: a holder of one of its keys granted during its lease is caught,
/// and a fence of one of its keys that went down too; `tally` counts the grant once.
#[test]
fn checkers_judge_every_key_of_a_grant_of_several() {
    let several_at = |key: &str, fence, from_ms, granted: bool| {
        let mut op = grant(1, "a", fence, from_ms, from_ms + 1, 100);
        op.key = key.into();
        op.request = Request::AcquireAll {
            keys: vec!["j".into(), "k".into()],
            ttl_ms: 100,
            block_ms: None,
            mode: Mode::Exclusive,
        };
        if !granted {
            op.outcome = Outcome::Busy;
        }
        op
    };
    let several = |key: &str, fence, granted| several_at(key, fence, 0, granted);
    let good = [
        several("j", 10, true),
        several("k", 11, true),
        grant(2, "b", 20, 150, 151, 100),
    ];
    assert!(checker::holder_limits(&good).is_empty());
    assert!(checker::fences_increase(&good).is_empty());
    let tally = checker::tally(&good);
    assert_eq!((tally.several_asked, tally.several_granted), (1, 1));
    assert!(tally.limits_untested().is_empty());
    // `grant` is of key "k": 50 ms into the lease the grant of "j" and "k" has on it.
    let overlapping = [
        several("j", 10, true),
        several("k", 11, true),
        grant(2, "b", 20, 50, 51, 100),
    ];
    assert_eq!(checker::holder_limits(&overlapping).len(), 1);
    // "k" was granted fence 20 before the grant of "j" and "k" was asked for.
    let lower = [
        grant(2, "b", 20, 0, 1, 100),
        several_at("j", 30, 5, true),
        several_at("k", 15, 5, true),
    ];
    assert_eq!(checker::fences_increase(&lower).len(), 1);
    let never = [several("j", 0, false), several("k", 0, false)];
    assert_eq!(checker::tally(&never).limits_untested().len(), 1);
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

/// A grant of `token` in `session` on "k", asked at `from_ms`, answered at `to_ms`.
fn in_session(
    client: usize,
    session: &str,
    token: &str,
    fence: i64,
    (from_ms, to_ms): (i64, i64),
    ttl_ms: i64,
    lock_delay_ms: i64,
) -> Op {
    let mut op = grant(client, token, fence, from_ms, to_ms, ttl_ms);
    op.request = Request::SessionAcquire {
        session: session.into(),
        token: token.into(),
        ttl_ms,
        block_ms: None,
        mode: Mode::Exclusive,
        lock_delay_ms,
    };
    op
}

/// A keepalive of `session` sent at `at_ms`, answered 1 ms later with `outcome`.
fn keepalive(client: usize, session: &str, at_ms: i64, ttl_ms: i64, outcome: Outcome) -> Op {
    Op {
        client,
        key: String::new(),
        request: Request::KeepAlive {
            session: session.into(),
            ttl_ms,
        },
        invoked_us: at_ms * MS,
        completed_us: (at_ms + 1) * MS,
        outcome,
        node: 0,
        confirmed: true,
    }
}

/// A release of `token` on "k" sent at `at_ms`, answered `ok` 1 ms later.
fn release(client: usize, token: &str, at_ms: i64, ok: bool) -> Op {
    let mut op = refresh(client, token, at_ms, 0, ok);
    op.request = Request::Release {
        token: token.into(),
    };
    op
}

/// A close of `session` sent at `at_ms`, answered `n` 1 ms later.
fn close(client: usize, session: &str, at_ms: i64, n: i64) -> Op {
    let mut op = keepalive(client, session, at_ms, 0, Outcome::Count(n));
    op.request = Request::Close {
        session: session.into(),
    };
    op
}

#[test]
fn session_checker_catches_a_holder_overlapping_a_lease_its_keepalive_kept() {
    // A holds in session s from 1 ms with a 100 ms lease; B is granted at 130 ms.
    let a = in_session(1, "s", "a", 10, (0, 1), 100, 0);
    let b = grant(2, "b", 20, 130, 131, 100);
    assert!(checker::holder_limits(&[a.clone(), b.clone()]).is_empty());
    // A keepalive at 60 ms that counted A keeps it believed until 160 ms: B overlaps.
    let kept = keepalive(1, "s", 60, 100, Outcome::Count(1));
    let anomalies = checker::holder_limits(&[a.clone(), kept.clone(), b.clone()]);
    assert_eq!(anomalies.len(), 1, "{anomalies:?}");
    assert!(checker::session_losses(&[a.clone(), kept.clone()]).is_empty());
    // Answered 0: A is lost from the keepalive's send, and a believed holding certainly
    // within its lease was not found.
    let none = keepalive(1, "s", 60, 100, Outcome::Count(0));
    assert!(checker::holder_limits(&[a.clone(), none.clone(), b.clone()]).is_empty());
    assert_eq!(checker::session_losses(&[a.clone(), none]).len(), 1);
    // The session may also have a holding whose reply was lost: 1 is short of 2.
    let mut unknown = in_session(1, "s", "u", 15, (20, 21), 100, 0);
    unknown.outcome = Outcome::Unknown("connection lost".into());
    let short = [a.clone(), unknown.clone(), kept.clone(), b.clone()];
    assert!(checker::holder_limits(&short).is_empty());
    // Settled by a release answered 0 before the keepalive, it counts no more.
    let settled = [
        a.clone(),
        unknown,
        release(1, "u", 40, false),
        kept.clone(),
        b.clone(),
    ];
    assert_eq!(checker::holder_limits(&settled).len(), 1);
    // Unconfirmed by a replica, a keepalive keeps nothing for the client.
    let mut unconfirmed = kept.clone();
    unconfirmed.confirmed = false;
    assert!(checker::holder_limits(&[a.clone(), unconfirmed, b.clone()]).is_empty());
    // Sent after A's deadline, a keepalive cannot bring A back; that it counted A is a
    // revival (A's lease certainly ended by 102 ms).
    let late = keepalive(1, "s", 120, 100, Outcome::Count(1));
    assert!(checker::holder_limits(&[a.clone(), late.clone(), b.clone()]).is_empty());
    assert_eq!(checker::session_revivals(&[a.clone(), late]).len(), 1);
    // A release sent ends the belief, whatever came back.
    let released = release(1, "a", 110, true);
    assert!(checker::holder_limits(&[a.clone(), kept.clone(), released, b.clone()]).is_empty());
    // So does a close.
    assert!(checker::holder_limits(&[a, kept, close(1, "s", 110, 1), b]).is_empty());
}

#[test]
fn lock_delay_checker_catches_a_grant_during_the_delay() {
    // A's lease (100 ms from 0) runs out into a 200 ms lock-delay: nobody before 300 ms.
    let a = in_session(1, "s", "a", 10, (0, 1), 100, 200);
    let b_at = |at_ms| grant(2, "b", 20, at_ms, at_ms + 1, 100);
    let during = [a.clone(), b_at(150)];
    assert!(
        checker::holder_limits(&during).is_empty(),
        "not held by then"
    );
    let anomalies = checker::lock_delays(&during);
    assert_eq!(anomalies.len(), 1, "{anomalies:?}");
    assert!(anomalies[0].contains("during a lock-delay"));
    let tested = checker::lock_delays_tested(&during);
    assert_eq!((tested.entered, tested.followed), (1, 1));
    assert_eq!(tested.least_margin_ms, Some(-149));
    assert!(checker::lock_delays(&[a.clone(), b_at(310)]).is_empty());
    // Released while held: no quarantine.
    let released = [a.clone(), release(1, "a", 50, true), b_at(60)];
    assert!(checker::lock_delays(&released).is_empty());
    // Released after the lease certainly ended (answered 0): the quarantine stands.
    let late = [a.clone(), release(1, "a", 150, false), b_at(160)];
    assert_eq!(checker::lock_delays(&late).len(), 1);
    // Without a delay there is no quarantine to cut short.
    let plain = in_session(1, "s", "a", 10, (0, 1), 100, 0);
    assert!(checker::lock_delays(&[plain, b_at(150)]).is_empty());
    // A reader's room stays taken: another reader may join, a writer may not.
    let reader = in_mode(Mode::Shared, a);
    let other_reader = in_mode(Mode::Shared, b_at(150));
    assert!(checker::lock_delays(&[reader.clone(), other_reader]).is_empty());
    assert_eq!(checker::lock_delays(&[reader, b_at(150)]).len(), 1);
}

#[test]
fn session_checkers_catch_a_revival_an_overcount_and_interleaved_commands() {
    let a = in_session(1, "s", "a", 10, (0, 1), 100, 0);
    // A release answered 1 after the lease certainly ended (102 ms).
    let revived = [a.clone(), release(1, "a", 150, true)];
    assert_eq!(checker::session_revivals(&revived).len(), 1);
    assert!(checker::session_revivals(&[a.clone(), release(1, "a", 90, true)]).is_empty());
    // A close releasing two where one holding can still be live.
    let two = [a.clone(), close(1, "s", 50, 2)];
    assert_eq!(checker::session_revivals(&two).len(), 1);
    assert!(checker::session_revivals(&[a.clone(), close(1, "s", 50, 1)]).is_empty());
    // Released (answered 1) at 20 ms, still counted at 50 ms: where nothing is lost, an
    // overcount; a crash could have brought it back, so not a revival.
    let counted = [
        a.clone(),
        release(1, "a", 20, true),
        keepalive(1, "s", 50, 100, Outcome::Count(1)),
    ];
    assert_eq!(checker::session_losses(&counted).len(), 1);
    assert!(checker::session_revivals(&counted).is_empty());
    // A keepalive sent while the acquire was in flight: the clients broke their rule.
    let mut slow = in_session(1, "s", "a", 10, (0, 30), 100, 0);
    slow.completed_us = 30 * MS;
    let overlapping = [slow, keepalive(1, "s", 10, 100, Outcome::Count(1))];
    assert_eq!(checker::session_revivals(&overlapping).len(), 1);
}

#[test]
fn session_durability_catches_a_missing_holding_and_an_unexplained_one() {
    // A believed until 10 s, crash at 1 s, LOCK.HELD read at 1.1 s.
    let ops = [in_session(1, "s", "a", 10, (0, 1), 10_000, 0)];
    let listed = |fence, mode: &str, pttl_ms| Listed {
        key: "k".into(),
        mode: mode.into(),
        fence,
        pttl_ms,
    };
    let held = |entries: Vec<Listed>| HeldFound {
        sessions: HashMap::from([("s".to_string(), entries)]),
        sent_us: 1_100 * MS,
        observed_us: 1_101 * MS,
    };
    let judge = |found: &HeldFound| durability::session_holdings(&ops, 1_000 * MS, found);
    let fine = judge(&held(vec![listed(10, "exclusive", 8_900)]));
    assert!(fine.losses.is_empty() && fine.revived.is_empty());
    assert_eq!(fine.verified, 1);
    // Missing, or listed with a lease shorter than believed.
    assert_eq!(judge(&held(vec![])).losses.len(), 1);
    assert_eq!(
        judge(&held(vec![listed(10, "exclusive", 5_000)]))
            .losses
            .len(),
        1
    );
    // Never granted to the session, granted in another mode, a lease longer than any
    // command sent can have given.
    let invented = judge(&held(vec![listed(99, "exclusive", 8_900)]));
    assert_eq!((invented.revived.len(), invented.losses.len()), (1, 1));
    assert_eq!(
        judge(&held(vec![listed(10, "shared", 8_900)]))
            .revived
            .len(),
        1
    );
    assert_eq!(
        judge(&held(vec![listed(10, "exclusive", 60_000)]))
            .revived
            .len(),
        1
    );
    // Released (answered) before the crash, and back.
    let mut released = ops.to_vec();
    released.push(release(1, "a", 500, true));
    let back = held(vec![listed(10, "exclusive", 8_900)]);
    let judged = durability::session_holdings(&released, 1_000 * MS, &back);
    assert_eq!(judged.losses.len(), 1, "{:?}", judged.losses);
}

mod once {
    //! The run-once checks, each shown the anomaly it exists to catch.

    use crate::reliability::once_history::*;

    const MS: i64 = 1_000;

    fn run(client: usize, fence: i64, from_ms: i64, to_ms: i64, end: RunEnd) -> Run {
        Run {
            client,
            key: "k".into(),
            fence,
            claimed_us: from_ms * MS,
            granted_us: to_ms * MS,
            ttl_ms: 300,
            end,
        }
    }

    fn stored(at_ms: i64, result: &str) -> RunEnd {
        RunEnd::Stored {
            sent_us: at_ms * MS,
            result: result.into(),
        }
    }

    fn replay(fence: i64, result: &str) -> Replay {
        Replay {
            client: 9,
            key: "k".into(),
            fence,
            result: result.into(),
            answered_us: 5_000 * MS,
        }
    }

    #[test]
    fn a_second_successful_run_within_the_keep_time_is_caught() {
        let mut history = OnceHistory {
            runs: vec![
                run(1, 10, 0, 1, stored(50, "a")),
                run(2, 20, 100, 101, stored(150, "b")),
            ],
            replays: vec![],
        };
        assert_eq!(one_success_per_keep(&history, 60_000).len(), 1);
        assert!(
            one_success_per_keep(&history, 50).is_empty(),
            "after its keep"
        );
        history.runs.pop();
        assert!(all_anomalies(&history, 60_000).is_empty());
    }

    #[test]
    fn a_duplicate_answered_another_result_or_fence_is_caught() {
        let mut history = OnceHistory {
            runs: vec![run(1, 10, 0, 1, stored(50, "a"))],
            replays: vec![replay(10, "a")],
        };
        assert!(replays_match_their_run(&history).is_empty());
        history.replays = vec![replay(10, "b"), replay(11, "a")];
        assert_eq!(replays_match_their_run(&history).len(), 2);
        history.replays = vec![Replay {
            answered_us: 40 * MS,
            ..replay(10, "a")
        }];
        assert_eq!(
            replays_match_their_run(&history).len(),
            1,
            "answered before the result was stored"
        );
        history.runs = vec![run(1, 10, 0, 1, RunEnd::Refused)];
        history.replays = vec![replay(10, "a")];
        assert_eq!(
            replays_match_their_run(&history).len(),
            1,
            "a run that stored nothing"
        );
    }

    #[test]
    fn a_run_after_a_duplicate_was_answered_within_the_keep_time_is_caught() {
        // The run's DONE outcome is unknown to its client (a failover lost the reply or
        // the replication), yet a duplicate was answered its result: a later run of the
        // key contradicts that answer.
        let unknown = RunEnd::Unknown {
            result: Some("a".into()),
        };
        let mut history = OnceHistory {
            runs: vec![
                run(1, 10, 0, 1, unknown),
                run(2, 20, 5_100, 5_400, stored(5_450, "b")),
            ],
            replays: vec![replay(10, "a")],
        };
        assert_eq!(replayed_results_kept(&history, 60_000).len(), 1);
        assert_eq!(all_anomalies(&history, 60_000).len(), 1);
        assert!(
            replayed_results_kept(&history, 1_000).is_empty(),
            "after its keep time"
        );
        history.runs[1].claimed_us = 4_900 * MS;
        assert!(
            replayed_results_kept(&history, 60_000).is_empty(),
            "claimed before the duplicate was answered: not surely later"
        );
    }

    #[test]
    fn two_runs_at_once_or_out_of_fence_order_are_caught() {
        let released = RunEnd::Released { sent_us: 100 * MS };
        let mut history = OnceHistory {
            runs: vec![
                run(1, 10, 0, 1, released.clone()),
                run(2, 20, 50, 101, stored(150, "b")),
            ],
            replays: vec![],
        };
        assert!(runs_in_order_one_at_a_time(&history).is_empty());
        history.runs[1].granted_us = 60 * MS;
        assert_eq!(
            runs_in_order_one_at_a_time(&history).len(),
            1,
            "granted before the release was sent"
        );
        history.runs[0].end = RunEnd::Unknown { result: None };
        history.runs[1].granted_us = 200 * MS;
        assert_eq!(
            runs_in_order_one_at_a_time(&history).len(),
            1,
            "granted before a crashed run's lease can have ended"
        );
        history.runs[1].granted_us = 400 * MS;
        history.runs[1].fence = 5;
        assert_eq!(
            runs_in_order_one_at_a_time(&history).len(),
            1,
            "a later run under a lower fence"
        );
    }
}
