//! Disruption from outside the lock protocol while waiters queue: leases shortened by
//! `PEXPIRE` and `LOCK.REFRESH`, databases swapped, lock keys overwritten and moved. The
//! holders' leases no longer mean what they think (that is the point of the disruption),
//! so mutual exclusion is not judged here; what must hold is that every waiter gets
//! exactly one reply (no operation ends in a read timeout, no reply is malformed), that
//! fences keep increasing, and that handoffs come within 10 ms after the lease they
//! waited for ends (in the median of the probes; none before it, none a quarter second
//! late), measured on the server's own clock (the handoff's fence is the server's
//! microsecond clock when nothing else is granted in the same microsecond).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::reliability::checker;
use crate::reliability::history::Outcome;
use crate::reliability::report::{assert_none, Summary};
use crate::reliability::scale::seconds;
use crate::reliability::target::Target;
use crate::reliability::workload::{Load, LoadSpec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use testkit::resp::{RawClient, Reply};
use testkit::*;

/// One change from outside to a random key of the load.
fn disrupt(con: &mut Connection, rng: &mut StdRng, keys: usize) -> &'static str {
    let key = format!("disrupted:{}", rng.gen_range(0..keys));
    let action = rng.gen_range(0..5);
    let _: redis::RedisResult<Value> = match action {
        0 => cmd("PEXPIRE")
            .arg(&key)
            .arg(rng.gen_range(1..20))
            .query(con),
        1 => cmd("SWAPDB").arg(0).arg(1).query(con),
        2 => cmd("SET")
            .arg(&key)
            .arg("overwritten")
            .arg("KEEPTTL")
            .query(con),
        3 => cmd("MOVE").arg(&key).arg(2).query(con),
        _ => cmd("PERSIST").arg(&key).query(con),
    };
    ["pexpire", "swapdb", "overwrite", "move", "persist"][action]
}

/// A lease shortened while a client waits for it: how many ms after the new end of the
/// lease the server handed the lock over (from the handoff's fence).
fn handoff_lateness_ms(server: &Server, con: &mut Connection, round: usize) -> i64 {
    let key = format!("probe:{round}");
    acquire(con, &key, 60_000, &["TOKEN", "holder"]).unwrap();
    let mut waiter = RawClient::connect(server.port);
    waiter.send_pipeline(&[&["LOCK.ACQUIRE", &key, "1000", "BLOCK", "5000"]]);
    eventually(Duration::from_secs(5), "the probe waiter queued", || {
        lock_info(con, &key).is_some_and(|info| info["waiters"] == Value::Int(1))
    });
    // The new end is read in the same transaction as the shortening: read after it, a
    // stall of the test longer than the 20 ms left (a busy machine) would read the next
    // holder's expiry, or none once that one ended too.
    let mut shorten = redis::pipe();
    shorten.atomic();
    if round.is_multiple_of(2) {
        shorten.cmd("PEXPIRE").arg(&key).arg(20);
    } else {
        shorten.cmd("LOCK.REFRESH").arg(&key).arg("holder").arg(20);
    }
    let (shortened, deadline): (i64, i64) = shorten
        .cmd("PEXPIRETIME")
        .arg(&key)
        .query(con)
        .expect("the shortening and the new end");
    assert_eq!(shortened, 1);
    let reply = waiter
        .try_read_reply(Duration::from_secs(5))
        .expect("the probe waiter was answered");
    let Reply::Array(Some(grant)) = reply else {
        panic!("the probe waiter was not granted: {reply:?}")
    };
    let Some(Reply::Integer(fence)) = grant.get(1) else {
        panic!("not a grant: {grant:?}")
    };
    fence / 1_000 - deadline
}

#[test]
fn waiters_under_outside_disruption_get_one_reply_and_timely_handoffs() {
    let server = Server::start();
    let spec = LoadSpec {
        clients: 24,
        keys: 4,
        ttl_ms: (100, 400),
        block_fraction: 0.7,
        block_ms: (50, 1_500),
        read_timeout: Duration::from_secs(4),
        ..LoadSpec::standard("disrupted:")
    };
    let load = Load::start(spec.clone(), Arc::new(Target::new(server.port)));
    let mut con = server.connect();
    let mut rng = StdRng::seed_from_u64(0xd15c);
    let run = seconds(6, 60);
    let started = Instant::now();
    let mut disruptions = std::collections::BTreeMap::new();
    let mut lateness = Vec::new();
    while started.elapsed() < run {
        for _ in 0..10 {
            *disruptions
                .entry(disrupt(&mut con, &mut rng, spec.keys))
                .or_insert(0) += 1;
            thread::sleep(Duration::from_millis(rng.gen_range(5..30)));
        }
        lateness.push(handoff_lateness_ms(&server, &mut con, lateness.len()));
    }
    // Leave time for every queued waiter to be answered before the load stops.
    thread::sleep(Duration::from_millis(1_600));
    let finished = load.finish();
    let unanswered: Vec<String> = finished
        .ops
        .iter()
        .filter(|op| matches!(&op.outcome, Outcome::Unknown(_)))
        .map(|op| format!("no reply: {op:?}"))
        .collect();
    let mut anomalies = unanswered;
    anomalies.extend(checker::malformed_replies(&finished.ops));
    anomalies.extend(checker::fences_increase(&finished.ops));
    // Never before the lease's end; and on time, judged by the median of the probes: a
    // busy machine delays the server's timer in some probes (13 and 22 ms were seen),
    // not in most, where a handoff left to Redis's expiry cycle (every 100 ms) would
    // come some 50 ms late in the median. A probe later than a quarter second is an
    // anomaly however busy the machine.
    anomalies.extend(
        lateness
            .iter()
            .filter(|late| !(0..=250).contains(*late))
            .map(|late| format!("a handoff {late} ms after the lease ended")),
    );
    lateness.sort_unstable();
    if let Some(median) = lateness.get(lateness.len() / 2).filter(|m| **m > 10) {
        anomalies.push(format!(
            "handoffs {median} ms after the lease ended in the median: {lateness:?}"
        ));
    }
    let handoffs = info_field(&mut con, "fencelock", "fencelock_handoffs").unwrap_or_default();
    Summary {
        scenario: "outside disruption",
        fault: format!("{disruptions:?} while waiters queue"),
        load: spec.describe(),
        ops: finished.ops.len(),
        anomalies: anomalies.len(),
        notes: format!(
            "handoffs {handoffs}; probe handoff lateness (ms, server clock) min {} median {} max {}",
            lateness.first().unwrap_or(&0),
            lateness.get(lateness.len() / 2).unwrap_or(&0),
            lateness.last().unwrap_or(&0)
        ),
    }
    .emit();
    assert_none("outside disruption", &anomalies);
    assert!(lateness.len() >= 5, "too few probes: {lateness:?}");
    assert!(
        finished.ops.iter().any(|op| op.fence().is_some()),
        "the load made no grants"
    );
}
