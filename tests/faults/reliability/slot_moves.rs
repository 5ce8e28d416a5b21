//! A three-primary cluster whose slots move by atomic slot migration (Valkey 9's
//! `CLUSTER MIGRATESLOTS`), for the fault scenarios: start it, find a key's owner, move
//! a slot to completion, or start a move and cancel it while the receiving node is
//! frozen (so that it cannot finish first).

use std::process::{Command, Stdio};
use std::time::Duration;

use testkit::*;

pub struct Cluster {
    pub nodes: Vec<Server>,
}

/// How a move ended (`CLUSTER GETSLOTMIGRATIONS`' state of the export).
#[derive(Debug, PartialEq, Eq)]
pub enum Moved {
    Completed,
    Cancelled,
}

impl Cluster {
    /// Three primaries with the module, or `None` (and a line saying why) on a server
    /// without atomic slot migration.
    pub fn start(scenario: &str) -> Option<Self> {
        let nodes: Vec<Server> = (0..3).map(|_| Server::cluster_node()).collect();
        if !has_atomic_migration(&nodes[0], scenario) {
            return None;
        }
        let cli = std::env::var("FENCELOCK_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
        let output = Command::new(cli)
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create");
        assert!(output.status.success(), "{output:?}");
        for node in &nodes {
            let mut con = node.connect();
            eventually(Duration::from_secs(30), "cluster_state:ok", || {
                let info: String = cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
                info.contains("cluster_state:ok")
            });
        }
        Some(Cluster { nodes })
    }

    pub fn slot(&self, key: &str) -> i64 {
        slot_of(&mut self.nodes[0].connect(), key)
    }

    /// The node that owns `slot`, as every node sees it (waits until they agree).
    pub fn owner(&self, slot: i64) -> usize {
        let ids: Vec<String> = self.nodes.iter().map(id).collect();
        let mut owner = usize::MAX;
        eventually(
            Duration::from_secs(20),
            "the nodes agree on the owner",
            || {
                let seen: Vec<Option<String>> =
                    self.nodes.iter().map(|n| owner_seen_by(n, slot)).collect();
                let first = seen[0].clone();
                owner = first
                    .as_ref()
                    .and_then(|first| ids.iter().position(|id| id == first))
                    .unwrap_or(usize::MAX);
                owner != usize::MAX && seen.iter().all(|s| *s == first)
            },
        );
        owner
    }

    /// Moves `slot` from `source` to `target`; with `cancel`, the target is frozen
    /// meanwhile and the move cancelled on the source.
    pub fn move_slot(&self, slot: i64, source: usize, target: usize, cancel: bool) -> Moved {
        let (from, to) = (&self.nodes[source], &self.nodes[target]);
        // Asked before the target may be frozen: a frozen node answers nothing.
        let target_id = id(to);
        if cancel {
            to.pause();
        }
        let export = start_migration(from, &target_id, slot);
        if cancel {
            let _: redis::RedisResult<()> = cmd("CLUSTER")
                .arg("CANCELSLOTMIGRATIONS")
                .query(&mut from.connect());
        }
        let state = migration_end(from, &export);
        if cancel {
            to.resume();
        }
        match state.as_str() {
            "success" => Moved::Completed,
            "cancelled" => Moved::Cancelled,
            other => panic!("the move from {source} to {target} ended {other}"),
        }
    }
}

fn id(node: &Server) -> String {
    cmd("CLUSTER")
        .arg("MYID")
        .query(&mut node.connect())
        .expect("CLUSTER MYID")
}
