//! Atomic slot migration as a fault (Valkey 9's `CLUSTER MIGRATESLOTS`): clients take,
//! refresh and release mutexes, read-write locks and semaphores whose keys share one
//! slot, through a path that follows cluster redirects (`MOVED`, `ASK`, `TRYAGAIN`),
//! while that slot moves from node to node, completed and cancelled by turns. The
//! history checker judges the run: fences of each key only rise, no more holders at
//! once than a mode admits, no stale write accepted by the fenced resource. Servers
//! without atomic slot migration skip it with a line saying so.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::reliability::checker;
use crate::reliability::report::{assert_none, Summary};
use crate::reliability::scale::seconds;
use crate::reliability::slot_moves::{Cluster, Moved};
use crate::reliability::target::Target;
use crate::reliability::workload::{Load, LoadSpec};

#[test]
fn atomic_slot_migrations_under_load() {
    let Some(cluster) = Cluster::start("atomic_slot_migrations_under_load") else {
        return;
    };
    // One hash tag: every key of the load, and so every lock, moves with the slot.
    let spec = LoadSpec {
        clients: 16,
        keys: 3,
        block_ms: (100, 1_500),
        read_timeout: Duration::from_secs(8),
        ..LoadSpec::with_shared_holders("{slot-moves}:")
    };
    let slot = cluster.slot("{slot-moves}:0");
    let mut owner = cluster.owner(slot);
    let target = Arc::new(Target::cluster(cluster.nodes[(owner + 1) % 3].port));
    let load = Load::start(spec.clone(), target);
    let (mut completed, mut cancelled) = (0, 0);
    let run = seconds(8, 60);
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < run || completed < 2 || cancelled < 1 {
        thread::sleep(Duration::from_millis(400));
        let to = (owner + 1 + round % 2) % 3;
        match cluster.move_slot(slot, owner, to, round % 3 == 2) {
            Moved::Completed => {
                completed += 1;
                owner = to;
            }
            Moved::Cancelled => cancelled += 1,
        }
        assert_eq!(
            cluster.owner(slot),
            owner,
            "the slot is where the move left it"
        );
        round += 1;
    }
    thread::sleep(Duration::from_millis(400));
    let finished = load.finish();
    let anomalies = checker::fenced_run(&finished);
    let tally = checker::tally(&finished.ops);
    Summary {
        scenario: "atomic slot migration",
        fault: format!(
            "{completed} completed and {cancelled} cancelled moves of the load's slot (CLUSTER MIGRATESLOTS)"
        ),
        load: spec.describe(),
        ops: finished.ops.len(),
        anomalies: anomalies.len(),
        notes: format!(
            "{} grants; stale accesses refused by fence {}; {}",
            tally.grants,
            finished.fenced.rejected,
            tally.modes()
        ),
    }
    .emit();
    assert_none("atomic slot migration", &anomalies);
    assert!(
        tally.grants > 50,
        "the load kept taking locks: {}",
        tally.grants
    );
    tally.assert_limits_tested();
}
