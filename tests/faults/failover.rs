//! Failover under load. A primary with a replica serves the load (mutexes, read-write
//! locks and semaphores); the primary is killed with SIGKILL, the replica promoted with
//! `REPLICAOF NO ONE`, and the clients move to it. Just before the kill the replica is
//! frozen, so the old primary goes on granting what the replica never receives. The new
//! primary's fences must exceed every fence the old one issued. Clients count a grant
//! only once `WAIT 1` confirms a replica has it (async replication otherwise loses grants
//! by design). Then a graceful `FAILOVER`, where nothing acknowledged may be lost even
//! without `WAIT`. Neither may ever show more holders at once than their modes admit.
//! In both, exclusive holders increment a counter through `LOCK.GUARD`, and the last
//! primary's counters must hold every acknowledged write: after the kill, a write counts
//! as acknowledged only once `WAIT 1` confirms it, as a grant does (the others are
//! reported, and may be lost); after the graceful switch, every answered write.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::reliability::checker;
use crate::reliability::guarded::{self, Written};
use crate::reliability::report::{assert_none, Summary};
use crate::reliability::scale::{pick, seconds};
use crate::reliability::target::Target;
use crate::reliability::workload::{Finished, Load, LoadSpec};
use testkit::*;

/// A fenced run's anomalies, plus fences that did not rise across the failover and
/// acknowledged guarded writes missing from the counters of `primary`, the last one;
/// and the guarded figures for the notes.
fn judge(finished: &Finished, primary: &Server, keys: &[String]) -> (Vec<String>, String) {
    let mut anomalies = checker::fenced_run(finished);
    anomalies.extend(checker::later_nodes_fence_higher(&finished.ops));
    let total = guarded::final_total(&mut primary.connect(), keys);
    anomalies.extend(finished.guarded.check(total));
    (anomalies, finished.guarded.describe(total))
}

/// Grants the old node issued after its replica stopped listening.
fn unreplicated_grants(finished: &Finished, node: usize) -> usize {
    finished
        .ops
        .iter()
        .filter(|op| op.node == node && op.fence().is_some() && !op.confirmed)
        .count()
}

#[test]
fn kill_9_of_the_primary_and_promotion_of_its_replica() {
    let spec = LoadSpec {
        clients: 30,
        confirm_with_wait: true,
        guarded_counter: true,
        ..LoadSpec::with_shared_holders("failover:")
    };
    // Two rounds even in a quick run, and more (up to 8) until the failovers have put
    // a guarded write at risk and lost a grant (the assertions below): on a busy
    // machine a round's 300 ms can pass with no guarded write in flight.
    let phase = seconds(3, 10);
    let mut primary = Server::start();
    let target = Arc::new(Target::new(primary.port));
    let mut replica = Server::start();
    replica.replicate_from(&primary);
    let load = Load::start(spec.clone(), target.clone());
    let mut missed = 0;
    let mut rounds = 0;
    while rounds < pick(2, 4)
        || (rounds < 8 && (missed == 0 || load.guarded.count(Written::Unconfirmed) == 0))
    {
        let round = rounds;
        rounds += 1;
        thread::sleep(phase);
        kill_primary_and_promote(&mut primary, &replica, &[], || {});
        target.move_to(replica.port);
        missed += unreplicated_grants_so_far(&load, round);
        // A fresh replica for the next round.
        primary = replica;
        replica = Server::start();
        replica.replicate_from(&primary);
    }
    thread::sleep(phase);
    let finished = load.finish();
    let (anomalies, guarded_notes) = judge(&finished, &primary, &spec.key_names());
    let tally = checker::tally(&finished.ops);
    Summary {
        scenario: "failover, kill -9 primary",
        fault: format!("{rounds} x (replica frozen 300 ms, primary SIGKILL, REPLICAOF NO ONE)"),
        load: format!("{}, grants confirmed by WAIT 1", spec.describe()),
        ops: tally.ops,
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants; {missed} grants the promoted replica never received, all below its fences; stale accesses refused by fence {}; control stale writes {}; {}; {guarded_notes} (every confirmed one required)",
            tally.grants,
            finished.fenced.rejected,
            finished.control.stale,
            tally.modes()
        ),
    }
    .emit();
    assert_none("failover after kill -9", &anomalies);
    assert!(
        missed > 0,
        "the old primary granted nothing the replica missed"
    );
    assert!(
        finished.guarded.count(Written::Unconfirmed) > 0,
        "no guarded write went unconfirmed: the failover put none at risk (is WAIT asked?)"
    );
    assert!(finished.control.stale > 0, "control run saw no overlap");
    tally.assert_limits_tested();
}

/// The replica (and any `others`) stop hearing the primary, which keeps granting for a
/// while (300 ms); then `before_kill` runs, the primary is killed with SIGKILL, the
/// replica promoted (`REPLICAOF NO ONE`) and the others made its replicas. The clients
/// still send to the dead primary: move them.
pub fn kill_primary_and_promote(
    primary: &mut Server,
    replica: &Server,
    others: &[&Server],
    before_kill: impl FnOnce(),
) {
    replica.pause();
    for other in others {
        other.pause();
    }
    thread::sleep(Duration::from_millis(300));
    before_kill();
    primary.kill();
    replica.resume();
    for other in others {
        other.resume();
    }
    let mut promoted = replica.connect();
    let _: () = cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut promoted)
        .unwrap();
    for other in others {
        other.replicate_from(replica);
    }
}

fn unreplicated_grants_so_far(load: &Load, node: usize) -> usize {
    let finished = Finished {
        ops: load.history.snapshot(),
        fenced: load.fenced.counts(),
        control: load.control.counts(),
        guarded: load.guarded.clone(),
        sessions: load.sessions.clone(),
    };
    unreplicated_grants(&finished, node)
}

fn role(con: &mut Connection) -> String {
    info_field(con, "replication", "role").unwrap_or_default()
}

#[test]
fn graceful_failover_loses_no_acknowledged_grant() {
    let spec = LoadSpec {
        clients: 30,
        guarded_counter: true,
        ..LoadSpec::with_shared_holders("graceful:")
    };
    let rounds = pick(1, 4);
    let phase = seconds(3, 10);
    let (mut primary, mut replica) = primary_and_replica();
    let target = Arc::new(Target::new(primary.port));
    let load = Load::start(spec.clone(), target.clone());
    let mut switch_ms = Vec::new();
    for _ in 0..rounds {
        thread::sleep(phase);
        let started = Instant::now();
        let mut old = primary.connect();
        let _: () = cmd("FAILOVER")
            .arg("TIMEOUT")
            .arg(5_000)
            .query(&mut old)
            .expect("FAILOVER");
        let mut new = replica.connect();
        eventually(Duration::from_secs(10), "the replica took over", || {
            role(&mut new) == "master" && role(&mut old) == "slave"
        });
        switch_ms.push(started.elapsed().as_millis());
        target.move_to(replica.port);
        std::mem::swap(&mut primary, &mut replica);
        eventually(Duration::from_secs(10), "the old primary follows", || {
            info_field(&mut old, "replication", "master_link_status").as_deref() == Some("up")
        });
    }
    thread::sleep(phase);
    let finished = load.finish();
    let (anomalies, guarded_notes) = judge(&finished, &primary, &spec.key_names());
    let tally = checker::tally(&finished.ops);
    Summary {
        scenario: "graceful FAILOVER",
        fault: format!("{rounds} x FAILOVER (switch took {switch_ms:?} ms)"),
        load: spec.describe(),
        ops: tally.ops,
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants; stale accesses refused by fence {}; control stale writes {}; {}; {guarded_notes} (every acknowledged one required)",
            tally.grants,
            finished.fenced.rejected,
            finished.control.stale,
            tally.modes()
        ),
    }
    .emit();
    assert_none("graceful failover", &anomalies);
    assert!(finished.control.stale > 0, "control run saw no overlap");
    tally.assert_limits_tested();
}
