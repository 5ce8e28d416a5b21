//! Crash faults: `kill -9` of redis-server every few seconds under load (50 clients on
//! mutexes, read-write locks and semaphores, BLOCK and plain acquires mixed, exclusive
//! holders incrementing a counter through `LOCK.GUARD`), restarted from its AOF, first
//! with `appendfsync always` (nothing acknowledged may be lost, grant or guarded write),
//! then with `everysec` (the loss window is measured and reported, and still no stale
//! guarded write may be admitted); and a restart after a downtime longer than every
//! lease (no lease may come back alive). The kill-and-restart loop (`run_crashes_with`)
//! also serves the session scenarios (`sessions`): after each restart, every session's
//! `LOCK.HELD` is compared with what its client believed.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::reliability::checker;
use crate::reliability::durability::{self, Loss};
use crate::reliability::guarded;
use crate::reliability::history::now_us;
use crate::reliability::report::{assert_none, Summary};
use crate::reliability::scale::{pick, seconds};
use crate::reliability::target::Target;
use crate::reliability::workload::{Finished, Load, LoadSpec};
use testkit::resp::{RawClient, Reply};
use testkit::*;

pub struct CrashRun {
    pub spec: LoadSpec,
    pub finished: Finished,
    pub crashes: Crashes,
    /// The guarded counters' total on the server as last restarted.
    pub guarded_total: i64,
}

/// What the kills and restarts showed.
#[derive(Default)]
pub struct Crashes {
    pub count: usize,
    pub losses: Vec<Loss>,
    /// Holdings checked in full after a restart (held, unexpired, acknowledged).
    pub verified: usize,
    /// Acknowledged guarded writes a restarted server did not show.
    pub guarded_losses: Vec<Loss>,
    /// Believed session holdings a restarted server's `LOCK.HELD` lost (apart from
    /// `losses`, which are the keys' and plain holders').
    pub session_losses: Vec<Loss>,
    /// Session holdings a restarted server listed that no history explains.
    pub revived: Vec<String>,
    /// Of `verified`, the believed session holdings a restarted server listed in full.
    pub session_verified: usize,
    /// When each killed process was gone: where one server process ends and the next
    /// begins, for the guarded writes.
    pub killed_us: Vec<i64>,
}

/// Runs the standard load with shared holders and guarded writes against an AOF server
/// with `fsync`, killing it with SIGKILL every `every` for `duration`.
fn run_crashes(fsync: &str, duration: Duration, every: Duration) -> CrashRun {
    let spec = LoadSpec {
        guarded_counter: true,
        ..LoadSpec::with_shared_holders("crash:")
    };
    run_crashes_with(
        spec,
        &["appendonly", "yes", "appendfsync", fsync],
        duration,
        every,
        Snapshot::No,
    )
}

/// Whether each kill comes right after a `SAVE` (the restart then loads that snapshot:
/// everything answered before it, nothing in flight across it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Snapshot {
    No,
    BeforeEachKill,
}

/// Runs `spec` against a server started with `args`, killing it with SIGKILL every
/// `every` for `duration` (right after a `SAVE` with `Snapshot::BeforeEachKill`) and
/// restarting it from what it persisted.
pub fn run_crashes_with(
    spec: LoadSpec,
    args: &[&str],
    duration: Duration,
    every: Duration,
    snapshot: Snapshot,
) -> CrashRun {
    let keys = spec.key_names();
    let mut server = Server::with_args(args);
    let target = Arc::new(Target::new(server.port));
    let load = Load::start(spec.clone(), target.clone());
    let started = Instant::now();
    let mut crashes = Crashes::default();
    while started.elapsed() + every < duration {
        thread::sleep(every);
        target.close();
        crash(&mut server, &load, &keys, &mut crashes, snapshot);
        target.open();
    }
    thread::sleep(every);
    let finished = load.finish();
    // Read on the process last restarted: what every crash left, plus what came after.
    let guarded_total = guarded::final_total(&mut server.connect(), &keys);
    CrashRun {
        spec,
        finished,
        crashes,
        guarded_total,
    }
}

/// Kills the server and restarts it from what it persisted while the gate holds the load
/// back. Before load resumes, the state of every key, of every holder acknowledged before
/// the kill, of every guarded counter and of every session is read and compared with
/// what was acknowledged.
fn crash(
    server: &mut Server,
    load: &Load,
    keys: &[String],
    crashes: &mut Crashes,
    snapshot: Snapshot,
) {
    let crash_us = now_us();
    if snapshot == Snapshot::BeforeEachKill {
        let _: () = cmd("SAVE").query(&mut server.connect()).expect("SAVE");
    }
    server.kill();
    let killed_us = now_us();
    server.restart();
    let holders = durability::holders_to_read(&load.history.snapshot(), crash_us);
    let mut con = server.connect();
    let (found, observed_us) = durability::observe(&mut con, keys, &holders);
    let restored = guarded::counters(&mut con, keys);
    let counters_read_us = now_us();
    let sessions = durability::session_names(&load.history.snapshot());
    let held = durability::observe_held(&mut con, &sessions);
    let judged = durability::losses(&load.history.snapshot(), crash_us, &found, observed_us);
    crashes.verified += judged.verified;
    crashes.losses.extend(judged.losses);
    let in_sessions = durability::session_holdings(&load.history.snapshot(), crash_us, &held);
    crashes.verified += in_sessions.verified;
    crashes.session_verified += in_sessions.verified;
    crashes.session_losses.extend(in_sessions.losses);
    crashes.revived.extend(in_sessions.revived);
    let since_us = crashes.killed_us.last().copied().unwrap_or(0);
    crashes.guarded_losses.extend(load.guarded.lost_in_crash(
        &restored,
        since_us,
        (crash_us, killed_us, counters_read_us),
    ));
    crashes.killed_us.push(killed_us);
    crashes.count += 1;
}

#[test]
fn kill_9_under_load_with_appendfsync_always_loses_nothing_acknowledged() {
    let every = Duration::from_millis(pick(1_500, 2_500));
    let run = run_crashes("always", seconds(8, 90), every);
    let ops = &run.finished.ops;
    let crashes = &run.crashes;
    let guarded = &run.finished.guarded;
    let mut anomalies = checker::fenced_run(&run.finished);
    anomalies.extend(crashes.revived.iter().cloned());
    anomalies.extend(crashes.losses.iter().map(|loss| loss.what.clone()));
    anomalies.extend(crashes.session_losses.iter().map(|loss| loss.what.clone()));
    anomalies.extend(crashes.guarded_losses.iter().map(|loss| loss.what.clone()));
    anomalies.extend(guarded.check(run.guarded_total));
    let tally = checker::tally(ops);
    Summary {
        scenario: "crash, AOF always",
        fault: format!("kill -9 every {} ms, {} kills", every.as_millis(), crashes.count),
        load: run.spec.describe(),
        ops: tally.ops,
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants, {} unknown outcomes, lost acknowledged effects {} (0 required) over {} fully checked holdings; stale writes refused by fence {}; control (no fence check) stale writes {}; {}; lost acknowledged guarded writes {} (0 required); {}",
            tally.grants,
            tally.unknown,
            crashes.losses.len(),
            crashes.verified,
            run.finished.fenced.rejected,
            run.finished.control.stale,
            tally.modes(),
            crashes.guarded_losses.len(),
            guarded.describe(run.guarded_total)
        ),
    }
    .emit();
    assert_none("crash with appendfsync always", &anomalies);
    assert!(crashes.count >= 3, "only {} kills", crashes.count);
    assert!(
        crashes.verified > 0,
        "no holding was checked after a restart"
    );
    tally.assert_limits_tested();
    assert!(
        tally.grants > 100,
        "the load barely ran: {} grants",
        tally.grants
    );
    assert!(
        run.finished.control.stale > 0,
        "control run: no overlapping holders at all, so the fenced check proved nothing"
    );
}

#[test]
fn kill_9_under_load_with_appendfsync_everysec_reports_its_loss_window() {
    let every = Duration::from_millis(pick(1_500, 2_500));
    let run = run_crashes("everysec", seconds(8, 40), every);
    let ops = &run.finished.ops;
    let crashes = &run.crashes;
    let guarded = &run.finished.guarded;
    let mut anomalies = checker::always_required(ops);
    anomalies.extend(checker::stale_writes(&run.finished));
    anomalies.extend(crashes.revived.iter().cloned());
    // Lost guarded writes lower the total as a stale one would, so the total alone
    // cannot tell them apart; two writes of one value by one process can.
    anomalies.extend(guarded.stale_within_processes(&crashes.killed_us));
    anomalies.extend(guarded.beyond_sent(run.guarded_total));
    let overlaps = checker::overlap_count(ops);
    let window_ms = loss_window_ms(&crashes.losses);
    let guarded_window_ms = loss_window_ms(&crashes.guarded_losses);
    let tally = checker::tally(ops);
    Summary {
        scenario: "crash, AOF everysec",
        fault: format!("kill -9 every {} ms, {} kills", every.as_millis(), crashes.count),
        load: run.spec.describe(),
        ops: tally.ops,
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants; lost acknowledged effects {} (loss window {window_ms} ms), holder overlaps from them {overlaps}; stale writes refused by fence {}; control stale writes {}; {}; lost acknowledged guarded writes {} (loss window {guarded_window_ms} ms); {}",
            tally.grants,
            crashes.losses.len(),
            run.finished.fenced.rejected,
            run.finished.control.stale,
            tally.modes(),
            crashes.guarded_losses.len(),
            guarded.describe(run.guarded_total)
        ),
    }
    .emit();
    assert_none("crash with appendfsync everysec", &anomalies);
    tally.assert_limits_tested();
    // Redis bounds everysec loss at about two seconds (a delayed background fsync).
    assert!(
        window_ms <= 2_500,
        "loss window {window_ms} ms: {:?}",
        crashes.losses
    );
    assert!(
        guarded_window_ms <= 2_500,
        "guarded loss window {guarded_window_ms} ms: {:?}",
        crashes.guarded_losses
    );
    assert!(run.finished.control.stale > 0, "control run saw no overlap");
}

/// How far back before their crash the losses reach, in ms.
pub fn loss_window_ms(losses: &[Loss]) -> i64 {
    losses
        .iter()
        .map(|loss| loss.window_us / 1_000)
        .max()
        .unwrap_or(0)
}

/// Locks on many keys with leases up to `max_ttl` ms, half refreshed, some with blocked
/// waiters; returns every (key, token, fence).
fn hold_many(server: &Server, keys: usize, max_ttl: i64) -> Vec<(String, String, i64)> {
    let mut con = server.connect();
    let mut pipe = redis::pipe();
    for i in 0..keys {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("down:{i}"))
            .arg(100 + (i as i64 * 37) % (max_ttl - 100));
    }
    let grants: Vec<(String, i64)> = pipe.query(&mut con).expect("grants");
    let mut refresh = redis::pipe();
    for (i, (token, _)) in grants.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        refresh
            .cmd("LOCK.REFRESH")
            .arg(format!("down:{i}"))
            .arg(token)
            .arg(max_ttl);
    }
    let refreshed: Vec<i64> = refresh.query(&mut con).expect("refreshes");
    // A lease as short as 100 ms can end before its refresh arrives on a busy machine;
    // that refresh answers 0 because the lock is gone, never because another holds it.
    for ((i, _), answer) in grants
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .zip(&refreshed)
    {
        if *answer != 1 {
            assert_eq!(
                int(&mut con, &["EXISTS", &format!("down:{i}")]),
                0,
                "down:{i}"
            );
        }
    }
    grants
        .into_iter()
        .enumerate()
        .map(|(i, (token, fence))| (format!("down:{i}"), token, fence))
        .collect()
}

fn latest_deadline(con: &mut Connection, locks: &[(String, String, i64)]) -> i64 {
    locks
        .iter()
        .map(|(key, _, _)| expire_time(con, key))
        .max()
        .unwrap_or(0)
}

/// One persistence setup: its server arguments and whether it stops by SIGKILL
/// (AOF always) or by a clean SHUTDOWN (RDB).
fn downtime_round(name: &str, args: &[&str], kill: bool, keys: usize) -> (usize, Vec<String>) {
    let max_ttl = 800;
    let mut server = Server::with_args(args);
    let locks = hold_many(&server, keys, max_ttl);
    // Waiters exist only in memory: they must not come back either.
    let mut waiters: Vec<RawClient> = (0..10)
        .map(|i| {
            let mut raw = RawClient::connect(server.port);
            // A waiter may be handed a lease that ran out during setup: keep it short too.
            let ttl = max_ttl.to_string();
            raw.send(&[
                b"LOCK.ACQUIRE",
                format!("down:{i}").as_bytes(),
                ttl.as_bytes(),
                b"BLOCK",
                b"0",
            ]);
            raw
        })
        .collect();
    let mut con = server.connect();
    // Each waiter is queued, or was already handed its lock (a busy machine can take
    // longer than the shortest leases to queue them): either way it is in the server's
    // memory only, and must not come back.
    let mut handed = 0;
    eventually(Duration::from_secs(10), "waiters queued or handed", || {
        handed += waiters
            .iter_mut()
            .filter_map(|waiter| waiter.try_read_reply(Duration::from_millis(1)))
            .inspect(|reply| assert!(reply.grant().is_some(), "{reply:?}"))
            .count();
        let queued: usize = info_field(&mut con, "fencelock", "fencelock_waiters")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        queued + handed == waiters.len()
    });
    let deadline = latest_deadline(&mut con, &locks);
    let highest = locks.iter().map(|(_, _, f)| *f).max().unwrap_or(0);
    if kill {
        server.kill();
    } else {
        server.shutdown();
    }
    waiters.clear();
    // Every lease ends by the latest deadline read, or by `max_ttl` after a handoff.
    let wait_ms = deadline.max(now_us() / 1_000 + max_ttl) + 200 - now_us() / 1_000;
    thread::sleep(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)));
    server.restart();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let mut anomalies = Vec::new();
    for (key, token, fence) in &locks {
        let alive = [
            raw.call_str(&["LOCK.FENCE", key]),
            raw.call_str(&["LOCK.INFO", key]),
            raw.call_str(&["LOCK.REFRESH", key, token, "60000"]),
            raw.call_str(&["EXISTS", key]),
        ];
        let expected = [
            Reply::Bulk(None),
            Reply::Bulk(None),
            Reply::Integer(0),
            Reply::Integer(0),
        ];
        if alive != expected {
            anomalies.push(format!(
                "{name}: {key} (fence {fence}) came back: {alive:?}"
            ));
        }
    }
    if int(&mut con, &["DBSIZE"]) != 0 {
        anomalies.push(format!("{name}: keys left after every lease ran out"));
    }
    let (_, next) = acquire(&mut con, "down:0", 1_000, &[]).expect("free after downtime");
    if next <= highest {
        anomalies.push(format!("{name}: fence {next} not above {highest}"));
    }
    (locks.len(), anomalies)
}

#[test]
fn restart_after_a_downtime_longer_than_every_lease_revives_none() {
    let keys = pick(300, 3_000);
    let always = ["appendonly", "yes", "appendfsync", "always"];
    let no_preamble = [
        "appendonly",
        "yes",
        "appendfsync",
        "always",
        "aof-use-rdb-preamble",
        "no",
    ];
    let rounds: [(&str, &[&str], bool); 3] = [
        ("AOF always, kill -9", &always, true),
        ("AOF without RDB preamble, kill -9", &no_preamble, true),
        ("RDB, clean shutdown", &["save", "3600 1"], false),
    ];
    let mut results: HashMap<&str, (usize, Vec<String>)> = HashMap::new();
    for (name, args, kill) in rounds {
        results.insert(name, downtime_round(name, args, kill, keys));
    }
    let checked: usize = results.values().map(|(n, _)| n).sum();
    let anomalies: Vec<String> = results.into_values().flat_map(|(_, a)| a).collect();
    Summary {
        scenario: "restart after long downtime",
        fault: "kill -9 (AOF always, with and without preamble) or shutdown (RDB), down longer than every lease".into(),
        load: format!("{keys} held locks per round, half refreshed, 10 blocked waiters"),
        ops: checked,
        anomalies: anomalies.len(),
        notes: "every lease expired, no waiter restored, fences still increase".into(),
    }
    .emit();
    assert_none("restart after downtime", &anomalies);
}
