//! Scenario 4's results: bytes per held lock, fencelock's, the floor module's (the same
//! holding and nothing else) and `SET NX PX`'s (alone and with its `fence:` counter),
//! and bytes left per released lock name, one figure per repetition each.

use serde::{Deserialize, Serialize};

use crate::stats::summarised;

/// Per-repetition figures, bytes per lock or per lock name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MemoryResult {
    /// Locks held at once in each measurement.
    pub locks: u64,
    #[serde(with = "summarised")]
    pub fencelock_held: Vec<f64>,
    /// The floor module's lock (`FLOOR.ACQUIRE`), same key names and count. Empty in a
    /// report from before the floor rows.
    #[serde(default, with = "summarised")]
    pub floor_held: Vec<f64>,
    #[serde(with = "summarised")]
    pub set_held: Vec<f64>,
    /// `SET NX PX` lock plus its `fence:` counter.
    #[serde(with = "summarised")]
    pub set_with_fence_held: Vec<f64>,
    #[serde(with = "summarised")]
    pub fencelock_left: Vec<f64>,
    #[serde(default, with = "summarised")]
    pub floor_left: Vec<f64>,
    /// The Lua pattern's `fence:` counter, kept after the release.
    #[serde(with = "summarised")]
    pub lua_left: Vec<f64>,
}
