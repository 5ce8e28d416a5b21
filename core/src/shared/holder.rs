//! One holder of a lock held shared: its holding and until when it takes its room.
//! Below the set (`mod.rs`) and both its stores (`list`, `index`), which all keep it.

use crate::holding::{Holding, OwnedHolding};

/// One shared holder.
#[derive(Debug)]
pub struct SharedHolder {
    pub(super) holding: OwnedHolding,
    /// Until when it takes its room (Unix ms): its lease's end, plus its lock-delay. It
    /// holds while `now <= deadline_ms()`, as Redis keys do, and after that, while its
    /// lock-delay lasts, takes its room quarantined, holding nothing. The stores order
    /// and expire holders by this.
    pub(crate) occupied_until_ms: i64,
}

impl SharedHolder {
    pub(super) fn new(holding: Box<Holding>, deadline_ms: i64) -> Self {
        let occupied_until_ms = Self::occupied_until(&holding, deadline_ms);
        SharedHolder {
            holding: OwnedHolding::new(holding),
            occupied_until_ms,
        }
    }

    /// Until when a holding whose lease ends at `deadline_ms` takes its room.
    pub(super) fn occupied_until(holding: &Holding, deadline_ms: i64) -> i64 {
        let delay = i64::try_from(holding.lock_delay_ms()).unwrap_or(i64::MAX);
        deadline_ms.saturating_add(delay)
    }

    pub fn holding(&self) -> &Holding {
        &self.holding
    }

    /// When its lease ends (Unix ms).
    pub fn deadline_ms(&self) -> i64 {
        let delay = i64::try_from(self.holding.lock_delay_ms()).unwrap_or(i64::MAX);
        self.occupied_until_ms.saturating_sub(delay)
    }

    pub fn is_live(&self, now_ms: i64) -> bool {
        now_ms <= self.deadline_ms()
    }

    /// Whether it still takes its room: holding, or quarantined after its lease ran out.
    pub(crate) fn occupies(&self, now_ms: i64) -> bool {
        now_ms <= self.occupied_until_ms
    }
}
