//! Cluster slots for the tests: the slot of a key, and atomic slot migration (Valkey 9's
//! `CLUSTER MIGRATESLOTS`) for the tests that move a slot between cluster nodes: whether the server has it, starting a move and waiting
//! for its end, and which node a node believes owns a slot. Shared by the compatibility
//! tests and the fault scenarios, so that both read `CLUSTER GETSLOTMIGRATIONS` and
//! `CLUSTER SLOTS` one way.

use std::time::Duration;

use redis::{cmd, Connection, Value};

use crate::locks::eventually;
use crate::server::Server;

/// `CLUSTER KEYSLOT key`: the slot `key` hashes to.
pub fn slot_of(con: &mut Connection, key: &str) -> i64 {
    cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(con)
        .expect("CLUSTER KEYSLOT")
}

/// Whether the server runs atomic slot migration; prints why `test` is skipped if not.
pub fn has_atomic_migration(node: &Server, test: &str) -> bool {
    let found: Vec<Value> = cmd("COMMAND")
        .arg("INFO")
        .arg("cluster|migrateslots")
        .query(&mut node.connect())
        .expect("COMMAND INFO");
    let has = found.iter().any(|entry| *entry != Value::Nil);
    if !has {
        eprintln!("skipped {test}: this server has no CLUSTER MIGRATESLOTS (Valkey 9+ only)");
    }
    has
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

/// Starts moving `slot` from `source` to the node `target_id`; returns the export's
/// name once `source` lists it.
pub fn start_migration(source: &Server, target_id: &str, slot: i64) -> String {
    let before: Vec<String> = exports(source).into_iter().map(|(name, _)| name).collect();
    let _: () = cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(target_id)
        .query(&mut source.connect())
        .expect("CLUSTER MIGRATESLOTS");
    let mut name = String::new();
    eventually(Duration::from_secs(10), "the export is listed", || {
        name = exports(source)
            .into_iter()
            .find(|(name, _)| !before.contains(name))
            .map(|(name, _)| name)
            .unwrap_or_default();
        !name.is_empty()
    });
    name
}

/// Waits for the export `export` of `source` to end; returns its final state
/// (`success`, `failed`, `cancelled`).
pub fn migration_end(source: &Server, export: &str) -> String {
    let mut state = String::new();
    eventually(Duration::from_secs(30), "the migration ends", || {
        state = exports(source)
            .into_iter()
            .find(|(name, _)| name == export)
            .map(|(_, state)| state)
            .unwrap_or_default();
        matches!(state.as_str(), "success" | "failed" | "cancelled")
    });
    state
}

/// The id of the master that owns `slot` as `node` sees it (`CLUSTER SLOTS`).
pub fn owner_seen_by(node: &Server, slot: i64) -> Option<String> {
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
