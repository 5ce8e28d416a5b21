//! Pause faults. A client paused past its lease (a sleep in the holder, like a GC pause)
//! that then resumes and writes must be refused by the fence. The server paused past
//! leases (`DEBUG SLEEP`, SIGSTOP/SIGCONT): after it resumes no refresh succeeds past
//! its deadline, waiters are handed the lock, and fences keep increasing. Under load,
//! mutexes, read-write locks and semaphores never have more certainly-live holders at
//! once than their modes admit.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::reliability::checker;
use crate::reliability::guarded;
use crate::reliability::report::{assert_none, Summary};
use crate::reliability::resource::Resource;
use crate::reliability::scale::seconds;
use crate::reliability::target::Target;
use crate::reliability::workload::{Finished, Load, LoadSpec};
use testkit::*;

fn notes(finished: &Finished) -> String {
    let tally = checker::tally(&finished.ops);
    format!(
        "{} grants; stale accesses refused by fence {}; control (no fence check) stale writes {}; {}",
        tally.grants,
        finished.fenced.rejected,
        finished.control.stale,
        tally.modes()
    )
}

#[test]
fn a_holder_paused_past_its_lease_is_refused_by_the_fence() {
    let server = Server::start();
    let mut a = server.connect();
    let mut b = server.connect();
    let fenced = Resource::fenced();
    let control = Resource::unfenced_control();
    let (a_token, a_fence) = acquire(&mut a, "res", 100, &[]).unwrap();
    let a_seen = (fenced.read("res", a_fence), control.read("res", a_fence));
    // B waits on the server; the lease runs out while A is "paused".
    let (b_token, b_fence) = acquire(&mut b, "res", 5_000, &["BLOCK", "5000"]).unwrap();
    let b_seen = fenced.read("res", b_fence).unwrap();
    assert!(fenced.write("res", b_fence, b_seen));
    control.write("res", b_fence, control.read("res", b_fence).unwrap());
    // A resumes and writes what it read before the pause.
    assert!(
        !fenced.write("res", a_fence, a_seen.0.unwrap()),
        "the fence refuses the paused holder"
    );
    control.write("res", a_fence, a_seen.1.unwrap());
    assert_eq!(fenced.counts().stale, 0);
    assert_eq!(
        control.counts().stale,
        1,
        "without the fence, A overwrote B"
    );
    assert_eq!(int(&mut a, &["LOCK.REFRESH", "res", &a_token, "100"]), 0);
    assert_eq!(int(&mut a, &["LOCK.RELEASE", "res", &a_token]), 0);
    assert_eq!(int(&mut b, &["LOCK.RELEASE", "res", &b_token]), 1);
}

#[test]
fn clients_paused_past_their_leases_under_load() {
    let server = Server::start();
    let spec = LoadSpec {
        clients: 24,
        keys: 3,
        ttl_ms: (80, 250),
        overrun_fraction: 0.3,
        overrun_ms: (30, 300),
        block_fraction: 0.5,
        guarded_counter: true,
        ..LoadSpec::with_shared_holders("paused-client:")
    };
    let load = Load::start(spec.clone(), Arc::new(Target::new(server.port)));
    thread::sleep(seconds(5, 40));
    let finished = load.finish();
    let mut anomalies = checker::fenced_run(&finished);
    let mut con = server.connect();
    let total = guarded::final_total(&mut con, &spec.key_names());
    anomalies.extend(finished.guarded.check(total));
    Summary {
        scenario: "client pauses",
        fault: format!(
            "{:.0}% of holders sleep 30-300 ms past their lease",
            spec.overrun_fraction * 100.0
        ),
        load: spec.describe(),
        ops: finished.ops.len(),
        anomalies: anomalies.len(),
        notes: notes(&finished),
    }
    .emit();
    assert_none("client pauses", &anomalies);
    assert!(finished.fenced.rejected > 0, "no paused writer was refused");
    assert!(finished.control.stale > 0, "control run saw no overlap");
    assert!(
        finished.guarded.refused() > 0,
        "no paused guarded writer was refused"
    );
    checker::tally(&finished.ops).assert_limits_tested();
}

/// Freezes the server for `pause`, alternately by `DEBUG SLEEP` and by SIGSTOP/SIGCONT.
fn pause_server(server: &Server, con: &mut Connection, pause: Duration, round: usize) {
    if round.is_multiple_of(2) {
        let _: () = cmd("DEBUG")
            .arg("SLEEP")
            .arg(pause.as_secs_f64())
            .query(con)
            .expect("DEBUG SLEEP");
    } else {
        server.pause();
        thread::sleep(pause);
        server.resume();
    }
}

#[test]
fn server_paused_past_leases_under_load() {
    let server = Server::start();
    let spec = LoadSpec {
        clients: 30,
        keys: 4,
        ttl_ms: (150, 400),
        refresh_fraction: 0.7,
        block_fraction: 0.5,
        block_ms: (200, 2_500),
        read_timeout: Duration::from_secs(6),
        guarded_counter: true,
        ..LoadSpec::with_shared_holders("paused-server:")
    };
    let load = Load::start(spec.clone(), Arc::new(Target::new(server.port)));
    let mut con = server.connect();
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let pause = Duration::from_millis(700);
    let run = seconds(6, 60);
    let started = Instant::now();
    let mut pauses = 0;
    while started.elapsed() < run {
        thread::sleep(Duration::from_millis(600));
        pause_server(&server, &mut con, pause, pauses);
        pauses += 1;
    }
    thread::sleep(Duration::from_millis(500));
    let finished = load.finish();
    let mut anomalies = checker::fenced_run(&finished);
    let total = guarded::final_total(&mut con, &spec.key_names());
    anomalies.extend(finished.guarded.check(total));
    let handoffs = info_field(&mut con, "fencelock", "fencelock_handoffs").unwrap_or_default();
    Summary {
        scenario: "server pauses",
        fault: format!(
            "{pauses} pauses of {} ms (DEBUG SLEEP and SIGSTOP/SIGCONT alternately)",
            pause.as_millis()
        ),
        load: spec.describe(),
        ops: finished.ops.len(),
        anomalies: anomalies.len(),
        notes: format!("{}; handoffs {handoffs}", notes(&finished)),
    }
    .emit();
    assert_none("server pauses", &anomalies);
    assert!(pauses >= 4);
    assert!(finished.control.stale > 0, "control run saw no overlap");
    checker::tally(&finished.ops).assert_limits_tested();
}

#[test]
fn after_a_server_pause_waiters_are_handed_off_and_late_refreshes_fail() {
    let server = Server::start();
    let mut holder = server.connect();
    // A long lease while the waiters line up (a busy machine can take longer than
    // 200 ms to connect 20 clients), then 200 ms from just before the pause.
    let (token, first_fence) = acquire(&mut holder, "k", 60_000, &[]).unwrap();
    let waiters = 20;
    let (tx, rx) = mpsc::channel();
    for _ in 0..waiters {
        let mut con = server.connect();
        let tx = tx.clone();
        thread::spawn(move || {
            let grant = acquire(&mut con, "k", 100, &["BLOCK", "20000"]);
            let at = Instant::now();
            if let Some((token, _)) = &grant {
                assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", token]), 1);
            }
            tx.send((grant, at)).unwrap();
        });
    }
    eventually(Duration::from_secs(30), "waiters queued", || {
        info_field(&mut holder, "fencelock", "fencelock_waiters").as_deref() == Some("20")
    });
    let mut late = server.connect();
    assert_eq!(int(&mut holder, &["LOCK.REFRESH", "k", &token, "200"]), 1);
    server.pause();
    // Sent while the server is frozen, answered after: by then the lease is long over.
    let late_refresh =
        thread::spawn(move || int(&mut late, &["LOCK.REFRESH", "k", &token, "60000"]));
    thread::sleep(Duration::from_millis(800));
    server.resume();
    // On the machine's clock, which the server's fences share: read once the signal has
    // been sent, so a test thread that a busy machine delays here only shortens the
    // measured delay, never lengthens it.
    let resumed_ms = now_ms();
    assert_eq!(late_refresh.join().unwrap(), 0, "refresh past the deadline");
    let mut grants: Vec<(i64, Instant)> = (0..waiters)
        .map(|_| {
            let (grant, at) = rx.recv_timeout(Duration::from_secs(20)).expect("a waiter");
            (grant.expect("every waiter is served").1, at)
        })
        .collect();
    grants.sort_by_key(|(_, at)| *at);
    // The first handoff on the server's clock (its fence), not when this thread read it.
    let first_latency = grants
        .iter()
        .map(|(fence, _)| fence_ms(*fence) - resumed_ms)
        .min()
        .unwrap_or(i64::MAX);
    let fences: Vec<i64> = grants.iter().map(|(fence, _)| *fence).collect();
    let mut anomalies = Vec::new();
    if fences[0] <= first_fence || fences.windows(2).any(|w| w[0] >= w[1]) {
        anomalies.push(format!(
            "fences not increasing: {first_fence} then {fences:?}"
        ));
    }
    Summary {
        scenario: "server pause, waiters",
        fault: "SIGSTOP 800 ms past a 200 ms lease, refresh sent while frozen".into(),
        load: format!("1 holder, {waiters} blocked waiters"),
        ops: waiters + 2,
        anomalies: anomalies.len(),
        notes: format!(
            "late refresh refused; all waiters served in turn; first handoff {first_latency} ms after resume (server clock)"
        ),
    }
    .emit();
    assert_none("waiters after a server pause", &anomalies);
    assert!(
        first_latency < 500,
        "first handoff {first_latency} ms after resume"
    );
}
