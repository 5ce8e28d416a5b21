//! Session commands in a cluster: `LOCK.KEEPALIVE` (like `LOCK.CLOSE` and `LOCK.HELD`)
//! names no key, so each node answers for its own holdings only. A client sends it to
//! every primary and sums the counts.

use std::collections::HashMap;
use std::time::Duration;

use redis::cluster_routing::{AggregateOp, MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use testkit::*;

use super::random_token;
use crate::cluster::Cluster;

/// Keys named `prefix:n`, `per_node` of them on each node.
fn keys_spread(cluster: &Cluster, prefix: &str, per_node: usize) -> Vec<String> {
    let mut taken: HashMap<usize, usize> = HashMap::new();
    let mut keys = Vec::new();
    for n in 0.. {
        let key = format!("{prefix}:{n}");
        let count = taken.entry(cluster.owner_of(&key)).or_default();
        if *count < per_node {
            *count += 1;
            keys.push(key);
        }
        if keys.len() == per_node * cluster.nodes.len() {
            return keys;
        }
    }
    unreachable!("the keys run out")
}

/// Holdings of `session` on every node together.
fn held_everywhere(cluster: &Cluster, session: &str) -> usize {
    cluster
        .nodes
        .iter()
        .map(|node| held(&mut node.connect(), session).len())
        .sum()
}

/// 12 locks of one session over 3 primaries, 4 on each. Broken: `LOCK.KEEPALIVE` sent
/// through the cluster client as a keyed command (the `redis` crate routes it by its
/// first argument, the session name, to one node): it keeps that node's 4, and the 8
/// others' leases run out without a word. Kept: sent to every primary (`route_command`
/// with `AllMasters`) with the counts summed: 12, every lease moved.
#[test]
fn a_keepalive_to_one_node_keeps_its_four_to_every_primary_all_twelve() {
    let cluster = Cluster::start();
    let mut client = cluster.client();
    let take =
        |client: &mut redis::cluster::ClusterConnection, key: &str, session: &str, ttl: i64| {
            let granted: Option<(String, i64)> = cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(ttl)
                .arg("SESSION")
                .arg(session)
                .arg("TOKEN")
                .arg(random_token())
                .query(client)
                .expect("LOCK.ACQUIRE");
            assert!(granted.is_some(), "{key}");
        };

    // Leases long enough for the 12 grants and the keepalive on a loaded machine.
    let ttl = 8_000;
    let session = random_token();
    let keys = keys_spread(&cluster, "lock:one-node", 4);
    for key in &keys {
        take(&mut client, key, &session, ttl);
    }
    let kept: i64 = cmd("LOCK.KEEPALIVE")
        .arg(&session)
        .arg(60_000)
        .query(&mut client)
        .expect("LOCK.KEEPALIVE");
    assert_eq!(kept, 4, "one node's holdings");
    let moved = keys
        .iter()
        .filter(|key| cmd("PTTL").arg(*key).query::<i64>(&mut client).unwrap() > ttl)
        .count();
    assert_eq!(moved, 4, "only that node's leases moved");
    eventually(Duration::from_secs(30), "the other leases run out", || {
        held_everywhere(&cluster, &session) == 4
    });

    let session = random_token();
    let keys = keys_spread(&cluster, "lock:every-primary", 4);
    for key in &keys {
        take(&mut client, key, &session, 20_000);
    }
    let mut keepalive = cmd("LOCK.KEEPALIVE");
    keepalive.arg(&session).arg(60_000);
    let kept = client
        .route_command(
            &keepalive,
            RoutingInfo::MultiNode((
                MultipleNodeRoutingInfo::AllMasters,
                Some(ResponsePolicy::Aggregate(AggregateOp::Sum)),
            )),
        )
        .expect("LOCK.KEEPALIVE to every primary");
    assert_eq!(kept, Value::Int(12));
    for key in &keys {
        let left: i64 = cmd("PTTL").arg(key).query(&mut client).unwrap();
        assert!(left > 20_000, "{key}'s lease moved: {left} ms left");
    }
}
