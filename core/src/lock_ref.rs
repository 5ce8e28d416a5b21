//! A borrowed view of a lock key's value, whatever its kind: an exclusive holding, a
//! shared set, or a quarantine (an exclusive holding past its lease, kept for its
//! lock-delay). Below both `value` (the owned value and its pointer) and `once` (a
//! run-once record reads as one of these), so neither has to import the other's.

use crate::holding::Holding;
use crate::mode::Mode;
use crate::shared::SharedHolders;

/// A borrowed lock value.
#[derive(Clone, Copy, Debug)]
pub enum LockRef<'a> {
    Exclusive(&'a Holding),
    Shared(&'a SharedHolders),
    /// An exclusive holding whose lease ran out, kept for its lock-delay: it holds
    /// nothing and admits nobody. The key's expiry is the lease's end plus the delay, so
    /// only whoever reads the key with its expiry can tell (`quarantined`).
    Quarantined(&'a Holding),
}

impl<'a> LockRef<'a> {
    /// An exclusive holding as it stands at `now_ms`: quarantined once past the lease
    /// end a holding with a lock-delay keeps (its key lasts the delay longer).
    pub fn exclusive(holding: &'a Holding, now_ms: i64) -> Self {
        match holding.lease_end_ms() {
            Some(end) if now_ms > end => LockRef::Quarantined(holding),
            _ => LockRef::Exclusive(holding),
        }
    }

    pub fn mode(self) -> Mode {
        match self {
            LockRef::Exclusive(_) | LockRef::Quarantined(_) => Mode::Exclusive,
            LockRef::Shared(set) => set.mode(),
        }
    }

    /// Whether the lock holds nothing and admits nobody until its lock-delay is over.
    pub fn is_quarantined(self) -> bool {
        matches!(self, LockRef::Quarantined(_))
    }

    /// The fence of the live holder with `token`, if it holds.
    pub fn fence_of(self, token: &[u8], now_ms: i64) -> Option<u64> {
        self.holding_of(token, now_ms).map(Holding::fence)
    }

    /// The live holding with `token`, if it holds.
    pub fn holding_of(self, token: &[u8], now_ms: i64) -> Option<&'a Holding> {
        match self {
            LockRef::Exclusive(held) => held.is_token(token).then_some(held),
            LockRef::Shared(set) => set.live_holder(token, now_ms).map(|h| h.holding()),
            LockRef::Quarantined(_) => None,
        }
    }

    /// The fence `LOCK.FENCE key` reports: the exclusive holder's, or the highest among
    /// live shared holders.
    pub fn visible_fence(self, now_ms: i64) -> Option<u64> {
        match self {
            LockRef::Exclusive(held) => Some(held.fence()),
            LockRef::Shared(set) => set.highest_fence(now_ms),
            LockRef::Quarantined(_) => None,
        }
    }

    /// Holders whose lease has not ended (a walk of a shared set).
    pub fn live_holders(self, now_ms: i64) -> usize {
        match self {
            LockRef::Exclusive(_) => 1,
            LockRef::Shared(set) => set.holding_count(now_ms),
            LockRef::Quarantined(_) => 0,
        }
    }

    /// Bytes allocated for the value (for `MEMORY USAGE`).
    pub fn allocated_bytes(self) -> usize {
        match self {
            LockRef::Exclusive(held) | LockRef::Quarantined(held) => held.allocated_bytes(),
            LockRef::Shared(set) => set.allocated_bytes(),
        }
    }
}
