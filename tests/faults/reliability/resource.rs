//! The protected resource: a counter per key that lock holders read, then later write
//! back incremented (a read-modify-write, the thing a lock exists to protect).
//!
//! The fenced resource registers the fence presented on every access and refuses any
//! access with a fence below the highest it has seen. The control resource checks
//! nothing. A *stale write* is an accepted write whose value was read before another
//! holder's accepted write: a lost update, i.e. two holders overlapped on it. The fenced
//! resource must see none; the control proves the faults made holders overlap.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

#[derive(Default, Clone, Copy, Debug)]
pub struct Counts {
    pub accepted: u64,
    /// Accesses refused because a higher fence had been seen.
    pub rejected: u64,
    /// Accepted writes that overwrote someone else's update.
    pub stale: u64,
}

#[derive(Default)]
struct Cell {
    highest_fence: i64,
    value: u64,
}

pub struct Resource {
    check_fence: bool,
    state: Mutex<(HashMap<String, Cell>, Counts)>,
}

impl Resource {
    pub fn fenced() -> Self {
        Self::new(true)
    }

    pub fn unfenced_control() -> Self {
        Self::new(false)
    }

    fn new(check_fence: bool) -> Self {
        Resource {
            check_fence,
            state: Mutex::new((HashMap::new(), Counts::default())),
        }
    }

    /// Reads the counter under `fence`; `None` when the fence is refused.
    pub fn read(&self, key: &str, fence: i64) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (cells, counts) = &mut *state;
        let cell = cells.entry(key.to_string()).or_default();
        if self.check_fence && fence < cell.highest_fence {
            counts.rejected += 1;
            return None;
        }
        cell.highest_fence = cell.highest_fence.max(fence);
        Some(cell.value)
    }

    /// Writes back `seen + 1` under `fence`; false when refused.
    pub fn write(&self, key: &str, fence: i64, seen: u64) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (cells, counts) = &mut *state;
        let cell = cells.entry(key.to_string()).or_default();
        if self.check_fence && fence < cell.highest_fence {
            counts.rejected += 1;
            return false;
        }
        cell.highest_fence = cell.highest_fence.max(fence);
        if cell.value != seen {
            counts.stale += 1;
        }
        cell.value = seen + 1;
        counts.accepted += 1;
        true
    }

    pub fn counts(&self) -> Counts {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1
    }
}
