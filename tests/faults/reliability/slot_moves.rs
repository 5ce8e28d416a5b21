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
        let found: Vec<Value> = cmd("COMMAND")
            .arg("INFO")
            .arg("cluster|migrateslots")
            .query(&mut nodes[0].connect())
            .expect("COMMAND INFO");
        if found.iter().all(|entry| *entry == Value::Nil) {
            eprintln!("skipped {scenario}: this server has no CLUSTER MIGRATESLOTS (Valkey 9+)");
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
        cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].connect())
            .expect("CLUSTER KEYSLOT")
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
        let target_id = id(to);
        let before: Vec<String> = exports(from).into_iter().map(|(name, _)| name).collect();
        if cancel {
            to.pause();
        }
        let started: redis::RedisResult<()> = cmd("CLUSTER")
            .arg("MIGRATESLOTS")
            .arg("SLOTSRANGE")
            .arg(slot)
            .arg(slot)
            .arg("NODE")
            .arg(&target_id)
            .query(&mut from.connect());
        if cancel {
            let _: redis::RedisResult<()> = cmd("CLUSTER")
                .arg("CANCELSLOTMIGRATIONS")
                .query(&mut from.connect());
        }
        started.expect("CLUSTER MIGRATESLOTS");
        let mut state = String::new();
        eventually(Duration::from_secs(30), "the move ends", || {
            state = exports(from)
                .into_iter()
                .find(|(name, _)| !before.contains(name))
                .map(|(_, state)| state)
                .unwrap_or_default();
            matches!(state.as_str(), "success" | "failed" | "cancelled")
        });
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

/// The exports `node` lists, as (name, state).
fn exports(node: &Server) -> Vec<(String, String)> {
    let entries: Vec<Vec<Value>> = cmd("CLUSTER")
        .arg("GETSLOTMIGRATIONS")
        .query(&mut node.connect())
        .expect("CLUSTER GETSLOTMIGRATIONS");
    entries
        .into_iter()
        .filter_map(|fields| {
            let field = |name: &str| -> Option<String> {
                fields
                    .chunks(2)
                    .find(|pair| {
                        redis::from_redis_value::<String>(pair[0].clone())
                            .ok()
                            .as_deref()
                            == Some(name)
                    })
                    .and_then(|pair| redis::from_redis_value(pair.get(1)?.clone()).ok())
            };
            (field("operation")?.as_str() == "EXPORT")
                .then(|| Some((field("name")?, field("state")?)))?
        })
        .collect()
}

fn owner_seen_by(node: &Server, slot: i64) -> Option<String> {
    let slots: Vec<Value> = cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut node.connect())
        .ok()?;
    slots.into_iter().find_map(|entry| {
        // start, end, the master, then one entry per replica (if any).
        let fields: Vec<Value> = redis::from_redis_value(entry).ok()?;
        let start: i64 = redis::from_redis_value(fields.first()?.clone()).ok()?;
        let end: i64 = redis::from_redis_value(fields.get(1)?.clone()).ok()?;
        let master: Vec<Value> = redis::from_redis_value(fields.get(2)?.clone()).ok()?;
        (start..=end)
            .contains(&slot)
            .then(|| redis::from_redis_value(master.get(2)?.clone()).ok())
            .flatten()
    })
}
