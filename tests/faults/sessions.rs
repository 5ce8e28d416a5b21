//! Sessions under faults (issue 22): session clients (`reliability::session`: a worker
//! holding up to three keys at a time in its session, some with a lock-delay, a
//! heartbeat keeping them alive with `LOCK.KEEPALIVE` alone) beside plain clients on the
//! same mutexes, read-write locks and semaphores, judged on what each client believed
//! (`reliability::belief`): no more holders at once than the modes admit, fences
//! increasing, no lock granted while a lease that ran out sits in its lock-delay, no
//! believed holding missing from a keepalive's, close's or release's answer, none
//! counted that cannot be live, and `LOCK.HELD` after every restart or promotion (and
//! at the end) agreeing with the beliefs.
//!
//! The faults: `kill -9` of the server restarted from its AOF (`appendfsync always`:
//! nothing believed may be lost; `everysec`: losses measured) or from the RDB snapshot
//! of a `SAVE` right before the kill (nothing believed when it was taken may be lost;
//! what was answered while it was taken is measured), reusing `crash`'s loop;
//! heartbeats that stall past the lease with their whole client (a SIGSTOP of the
//! process, as far as the locks can tell), under lock-delay, where `INFO`'s keepalive
//! and close counters must also match the history; and the primary killed and its
//! replica promoted, reusing `failover`'s steps, with every session command confirmed by
//! `WAIT 1`. Each takes 6-12 s at CI scale.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::crash::{self, loss_window_ms, CrashRun, Snapshot};
use crate::failover::kill_primary_and_promote;
use crate::reliability::belief::{Ended, Sessions};
use crate::reliability::checker;
use crate::reliability::durability::{self, Loss};
use crate::reliability::history::{now_us, Op, Outcome, Request};
use crate::reliability::report::{assert_none, Summary};
use crate::reliability::scale::{pick, seconds};
use crate::reliability::session::SessionSpec;
use crate::reliability::target::Target;
use crate::reliability::workload::{Finished, Load, LoadSpec};
use testkit::*;

/// Plain clients and session clients on 16 mutexes, 2 read-write locks (85% readers)
/// and 2 semaphores of 2.
fn spec(prefix: &'static str, plain: usize, sessions: SessionSpec) -> LoadSpec {
    LoadSpec {
        clients: plain,
        keys: 16,
        readers: 0.85,
        permits: 2,
        sessions,
        ..LoadSpec::with_shared_holders(prefix)
    }
}

/// Believed session holdings kept alive by a keepalive sent after one of `events` (a
/// restart, a promotion) and granted before it: sessions that went on across the fault.
fn kept_across(ops: &[Op], events: &[i64]) -> usize {
    Sessions::of(ops)
        .believed
        .iter()
        .filter(|b| {
            events
                .iter()
                .any(|&at| b.grant.invoked_us < at && b.kept_at_us.iter().any(|&kept| kept > at))
        })
        .count()
}

/// The sessions' figures for the notes: how beliefs ended, how lock-delays were tested,
/// which error replies came (by their first word).
fn session_notes(finished: &Finished) -> String {
    let ops = &finished.ops;
    let delays = checker::lock_delays_tested(ops);
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for op in ops {
        if let Outcome::Failed(text) = &op.outcome {
            let word = text.split_whitespace().next().unwrap_or_default();
            *errors.entry(word.to_string()).or_default() += 1;
        }
    }
    format!(
        "{}; quarantines certainly entered {}, {} of them exclusive and followed by a grant (least margin after the delay {:?} ms); session writes refused by fence {}; error replies {errors:?}",
        Sessions::of(ops).endings(),
        delays.entered,
        delays.followed,
        delays.least_margin_ms,
        finished.sessions.refused()
    )
}

/// What every session run must have done for its checks to mean something.
fn assert_sessions_ran(finished: &Finished) {
    let sessions = Sessions::of(&finished.ops);
    assert!(
        sessions.believed.len() > 50,
        "the session clients barely ran: {}",
        sessions.endings()
    );
    assert!(
        sessions.believed.iter().any(|b| b.kept_at_us.len() >= 2),
        "no session holding outlived two keepalives: {}",
        sessions.endings()
    );
    for ended in [Ended::Released, Ended::Closed] {
        assert!(
            sessions.believed.iter().any(|b| b.ended == ended),
            "no session holding ended {ended:?}: {}",
            sessions.endings()
        );
    }
}

/// Session clients whose heartbeats now and then stall past the lease, so that some
/// leases run out into their lock-delay around the faults too.
fn sometimes_stalling(sessions: SessionSpec) -> SessionSpec {
    SessionSpec {
        stall_fraction: 0.02,
        ..sessions
    }
}

/// The crash loop of `crash`, for `duration`, with plain and session clients on a server
/// started with `args`.
fn crash_run(
    prefix: &'static str,
    args: &[&str],
    duration: Duration,
    snapshot: Snapshot,
) -> CrashRun {
    let every = Duration::from_millis(pick(1_500, 2_500));
    let spec = spec(prefix, 8, sometimes_stalling(SessionSpec::standard(14)));
    crash::run_crashes_with(spec, args, duration, every, snapshot)
}

fn crash_fault(run: &CrashRun, what: &str) -> String {
    format!(
        "kill -9 every {} ms ({what}), {} kills",
        pick(1_500, 2_500),
        run.crashes.count
    )
}

#[test]
fn sessions_through_kill_9_with_appendfsync_always_lose_nothing_believed() {
    let run = crash_run(
        "s-always:",
        &aof_always("yes"),
        seconds(8, 40),
        Snapshot::No,
    );
    let finished = &run.finished;
    let crashes = &run.crashes;
    let mut anomalies = checker::fenced_run(finished);
    anomalies.extend(crashes.revived.iter().cloned());
    anomalies.extend(crashes.losses.iter().map(|loss| loss.what.clone()));
    anomalies.extend(crashes.session_losses.iter().map(|loss| loss.what.clone()));
    let kept = kept_across(&finished.ops, &crashes.killed_us);
    let tally = checker::tally(&finished.ops);
    Summary {
        scenario: "sessions, crash, AOF always",
        fault: crash_fault(&run, "AOF always"),
        load: run.spec.describe(),
        ops: tally.ops,
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants, {} unknown outcomes; lost believed or acknowledged effects {} (0 required) over {} holdings checked after restarts ({} of sessions, by LOCK.HELD); {kept} session holdings kept alive across a restart; {}; stale writes refused by fence {}; control stale writes {}; {}",
            tally.grants,
            tally.unknown,
            crashes.losses.len() + crashes.session_losses.len(),
            crashes.verified,
            crashes.session_verified,
            session_notes(finished),
            finished.fenced.rejected,
            finished.control.stale,
            tally.modes()
        ),
    }
    .emit();
    assert_none(
        "sessions through kill -9 with appendfsync always",
        &anomalies,
    );
    assert!(crashes.count >= 3, "only {} kills", crashes.count);
    assert!(
        crashes.session_verified > 0,
        "no believed session holding was there to check after a restart"
    );
    assert!(
        kept > 0,
        "no session was kept alive across a restart: the restarts outlasted every lease"
    );
    assert_sessions_ran(finished);
    tally.assert_limits_tested();
}

/// A run where acknowledged effects may be lost: what must hold whatever was lost, and
/// the losses measured. With `Snapshot::BeforeEachKill` the restarted server shows the
/// state of its `SAVE`, so the sessions' `LOCK.HELD` must show every holding believed at
/// that moment; what was answered while the snapshot was being taken may be lost (the
/// losses and what they cost are measured).
fn lossy_crash_run(prefix: &'static str, args: &[&str], snapshot: Snapshot, what: &'static str) {
    let run = crash_run(prefix, args, seconds(6, 30), snapshot);
    let finished = &run.finished;
    let crashes = &run.crashes;
    let ops = &finished.ops;
    let mut anomalies = checker::always_required(ops);
    anomalies.extend(checker::stale_writes(finished));
    anomalies.extend(crashes.revived.iter().cloned());
    if snapshot == Snapshot::BeforeEachKill {
        anomalies.extend(crashes.session_losses.iter().map(|loss| loss.what.clone()));
    }
    // Measured, not required: what the losses cost.
    let overlaps = checker::overlap_count(ops);
    let lost_in_sessions = checker::session_losses(ops).len();
    let delays_cut = checker::lock_delays(ops).len();
    let window_ms = loss_window_ms(&crashes.losses);
    let tally = checker::tally(ops);
    Summary {
        scenario: match snapshot {
            Snapshot::No => "sessions, crash, AOF everysec",
            Snapshot::BeforeEachKill => "sessions, crash, RDB",
        },
        fault: crash_fault(&run, what),
        load: run.spec.describe(),
        ops: tally.ops,
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants; lost effects after restarts: keys and plain holders {} (loss window {window_ms} ms), believed session holdings {} ({}required); {} holdings checked, {} of sessions by LOCK.HELD; from the losses: holder overlaps {overlaps}, believed session holdings not found later {lost_in_sessions}, lock-delays cut short {delays_cut}; {}; stale writes refused by fence {}; control stale writes {}",
            tally.grants,
            crashes.losses.len(),
            crashes.session_losses.len(),
            if snapshot == Snapshot::BeforeEachKill { "0 " } else { "not " },
            crashes.verified,
            crashes.session_verified,
            session_notes(finished),
            finished.fenced.rejected,
            finished.control.stale
        ),
    }
    .emit();
    assert_none(&format!("sessions through kill -9 with {what}"), &anomalies);
    assert!(crashes.count >= 3, "only {} kills", crashes.count);
    if snapshot == Snapshot::BeforeEachKill {
        assert!(
            crashes.session_verified > 0,
            "no believed session holding was in a snapshot to check"
        );
    }
    assert_sessions_ran(finished);
}

#[test]
fn sessions_through_kill_9_with_appendfsync_everysec_revive_nothing() {
    let args = ["appendonly", "yes", "appendfsync", "everysec"];
    lossy_crash_run("s-everysec:", &args, Snapshot::No, "AOF everysec");
}

#[test]
fn sessions_through_kill_9_right_after_an_rdb_save_keep_what_was_believed() {
    lossy_crash_run(
        "s-rdb:",
        &[],
        Snapshot::BeforeEachKill,
        "RDB only, SAVE right before each kill",
    );
}

/// Stops `load` with the gate closed first: `LOCK.HELD` of every session, read while
/// nothing new is sent, against the beliefs once what was in flight came back (a second:
/// longer than any BLOCK). The finished load, the holdings verified and the anomalies.
fn finish_with_held(load: Load, server: &Server) -> (Finished, usize, Vec<String>) {
    load.target.close();
    let closed_us = now_us();
    let sessions = durability::session_names(&load.history.snapshot());
    let held = durability::observe_held(&mut server.connect(), &sessions);
    thread::sleep(Duration::from_secs(1));
    let judged = durability::session_holdings(&load.history.snapshot(), closed_us, &held);
    let mut anomalies = judged.revived;
    anomalies.extend(judged.losses.into_iter().map(|loss: Loss| loss.what));
    (load.finish(), judged.verified, anomalies)
}

/// `INFO fencelock`'s keepalive and close counters against the history, where every
/// command of the run was answered by one server process.
fn counters_agree(server: &Server, ops: &[Op]) -> Vec<String> {
    let mut con = server.connect();
    let answered = |close: bool| {
        ops.iter()
            .filter(|op| matches!(op.request, Request::Close { .. }) == close)
            .filter_map(Op::count)
            .fold((0, 0), |(n, sum), count| (n + 1, sum + count))
    };
    let (keepalives, kept) = answered(false);
    let (closes, _) = answered(true);
    let mut anomalies = Vec::new();
    for (field, expected) in [
        ("fencelock_keepalives", keepalives),
        ("fencelock_kept_alive", kept),
        ("fencelock_closes", closes),
    ] {
        let shown = info_field(&mut con, "fencelock", field);
        if shown != Some(expected.to_string()) {
            anomalies.push(format!(
                "INFO {field} is {shown:?}, the history answered {expected}"
            ));
        }
    }
    anomalies
}

#[test]
fn sessions_whose_heartbeat_stalls_past_the_lease_keep_their_lock_delay() {
    let server = Server::start();
    let sessions = SessionSpec {
        stall_fraction: 0.06,
        stall_ms: (20, 250),
        lock_delay_fraction: 0.6,
        ..SessionSpec::standard(14)
    };
    let spec = LoadSpec {
        overrun_fraction: 0.0,
        ..spec("s-stall:", 6, sessions)
    };
    let load = Load::start(spec.clone(), Arc::new(Target::new(server.port)));
    thread::sleep(seconds(6, 40));
    let (finished, verified, held) = finish_with_held(load, &server);
    let mut anomalies = checker::fenced_run(&finished);
    anomalies.extend(held);
    anomalies.extend(counters_agree(&server, &finished.ops));
    let delays = checker::lock_delays_tested(&finished.ops);
    let ran_out = Sessions::of(&finished.ops)
        .believed
        .iter()
        .filter(|b| b.ended == Ended::RanOut)
        .count();
    Summary {
        scenario: "sessions, heartbeat stalls",
        fault: format!(
            "{} stalls of a session client (heartbeat and worker) 20-250 ms past its lease",
            finished.sessions.stalls()
        ),
        load: spec.describe(),
        ops: finished.ops.len(),
        anomalies: anomalies.len(),
        notes: format!(
            "{}; LOCK.HELD at the end agreed on {verified} believed holdings; INFO keepalive and close counters agree with the history; stale writes refused by fence {}; control stale writes {}; {}",
            session_notes(&finished),
            finished.fenced.rejected,
            finished.control.stale,
            checker::tally(&finished.ops).modes()
        ),
    }
    .emit();
    assert_none("sessions with stalling heartbeats", &anomalies);
    assert!(finished.sessions.stalls() >= 5, "too few stalls");
    assert!(ran_out > 0, "no session holding ran out");
    assert!(
        verified > 0,
        "LOCK.HELD listed no believed holding at the end"
    );
    assert!(
        delays.followed > 0,
        "no lock-delay was put to the test: {delays:?}"
    );
    assert!(
        finished.sessions.refused() > 0,
        "no resumed session holder was refused by the fence"
    );
    assert!(finished.control.stale > 0, "control run saw no overlap");
    assert_sessions_ran(&finished);
    checker::tally(&finished.ops).assert_limits_tested();
}

#[test]
fn sessions_through_kill_9_of_the_primary_and_promotion_of_its_replica() {
    // Leases long enough to outlast the 300 ms the replicas cannot confirm anything, so
    // that sessions can go on across the switch.
    let sessions = SessionSpec {
        ttl_ms: (1_200, 2_000),
        hold_ms: (200, 3_000),
        ..sometimes_stalling(SessionSpec::standard(14))
    };
    let spec = LoadSpec {
        confirm_with_wait: true,
        ..spec("s-failover:", 8, sessions)
    };
    let phase = seconds(3, 8);
    let mut primary = Server::start();
    let target = Arc::new(Target::new(primary.port));
    let mut replica = Server::start();
    replica.replicate_from(&primary);
    // A second replica, cut off with the first, follows the promoted one at once: the new
    // primary can confirm with WAIT right after the switch.
    let mut second = Server::start();
    second.replicate_from(&primary);
    let load = Load::start(spec.clone(), target.clone());
    let mut promoted_at = Vec::new();
    let mut verified = 0;
    let mut on_promotion = Vec::new();
    // Two rounds even in a quick run, and more (up to 8) until a promoted replica has
    // had a believed holding to check: on a busy machine the load may believe none at
    // the moment of a kill (every session's leases between renewals).
    let mut rounds = 0;
    while rounds < pick(2, 4) || (rounds < 8 && verified == 0) {
        rounds += 1;
        thread::sleep(phase);
        let mut killed_us = 0;
        kill_primary_and_promote(&mut primary, &replica, &[&second], || {
            target.close();
            killed_us = now_us();
        });
        // What the promoted replica holds for each session, before anyone sends to it.
        let ops = load.history.snapshot();
        let held =
            durability::observe_held(&mut replica.connect(), &durability::session_names(&ops));
        let judged = durability::session_holdings(&ops, killed_us, &held);
        verified += judged.verified;
        on_promotion.extend(judged.revived);
        on_promotion.extend(judged.losses.into_iter().map(|loss| loss.what));
        target.move_to(replica.port);
        target.open();
        promoted_at.push(killed_us);
        primary = replica;
        replica = second;
        second = Server::start();
        second.replicate_from(&primary);
    }
    thread::sleep(phase);
    let finished = load.finish();
    let mut anomalies = checker::fenced_run(&finished);
    anomalies.extend(checker::later_nodes_fence_higher(&finished.ops));
    anomalies.extend(on_promotion);
    let kept = kept_across(&finished.ops, &promoted_at);
    let tally = checker::tally(&finished.ops);
    Summary {
        scenario: "sessions, failover, kill -9 primary",
        fault: format!("{rounds} x (both replicas frozen 300 ms, primary SIGKILL, REPLICAOF NO ONE, the other replica follows)"),
        load: format!("{}, every session command confirmed by WAIT 1", spec.describe()),
        ops: tally.ops,
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants; LOCK.HELD of the promoted replicas agreed on {verified} believed holdings; {kept} session holdings kept alive across a promotion; {}; stale writes refused by fence {}; control stale writes {}; {}",
            tally.grants,
            session_notes(&finished),
            finished.fenced.rejected,
            finished.control.stale,
            tally.modes()
        ),
    }
    .emit();
    assert_none("sessions through failover", &anomalies);
    assert!(
        verified > 0,
        "no believed holding was there to check on a promoted replica"
    );
    assert!(kept > 0, "no session was kept alive across a promotion");
    assert_sessions_ran(&finished);
    tally.assert_limits_tested();
}
