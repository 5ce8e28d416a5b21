//! Property tests of the lock decisions (`fencelock_core::lock`) over every mode: random
//! acquires, renewals, releases and the passing of time, applied to a lock value the way
//! the module applies them, must never let a semaphore hold more than its limit, an
//! exclusive holder share the lock, a mode change while holders remain, or a fence
//! repeat or go down. `make fuzz` runs them with many cases (`PROPTEST_CASES`).

use fencelock_core::fence_clock::FenceClock;
use fencelock_core::holding::Holding;
use fencelock_core::lock::{acquire, Acquire, AcquireRequest, LockRef};
use fencelock_core::mode::Mode;
use fencelock_core::shared::SharedHolders;
use fencelock_core::value::LockValue;
use proptest::prelude::*;

const MAX_HOLDERS: usize = 6;

#[derive(Clone, Debug)]
enum Step {
    Acquire { token: u8, mode: Mode, ttl: i64 },
    Release { token: u8 },
    Wait { ms: i64 },
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Exclusive),
        Just(Mode::Shared),
        (1u32..4).prop_map(Mode::Semaphore),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..8, mode(), 1i64..50).prop_map(|(token, mode, ttl)| Step::Acquire { token, mode, ttl }),
        2 => (0u8..8).prop_map(|token| Step::Release { token }),
        1 => (1i64..30).prop_map(|ms| Step::Wait { ms }),
    ]
}

/// The lock as the module keeps it: a value, and (exclusive) its key's deadline.
#[derive(Default)]
struct Model {
    value: Option<(LockValue, i64)>,
}

impl Model {
    /// What Redis and the write paths do before a decision: an expired key is gone,
    /// ended shared holders are dropped, an empty set is no key.
    fn settle(&mut self, now: i64) {
        let expired = match &mut self.value {
            Some((LockValue::Exclusive(_) | LockValue::Once(_), deadline)) => now > *deadline,
            Some((LockValue::Shared(set), _)) => {
                set.take_ended(now);
                set.is_empty()
            }
            None => false,
        };
        if expired {
            self.value = None;
        }
    }

    fn current(&self) -> Option<LockRef<'_>> {
        self.value.as_ref().map(|(value, _)| match value {
            LockValue::Exclusive(holding) => LockRef::Exclusive(holding),
            LockValue::Shared(set) => LockRef::Shared(set),
            LockValue::Once(record) => record.as_lock(),
        })
    }

    fn grant(&mut self, token: &[u8], fence: u64, deadline: i64, mode: Mode) {
        let holding = Holding::pack(token, fence).expect("packable");
        match (&mut self.value, mode) {
            (_, Mode::Exclusive) => self.value = Some((LockValue::Exclusive(holding), deadline)),
            (Some((LockValue::Shared(set), _)), _) => {
                set.put(holding, deadline).expect("fences are unique")
            }
            _ => {
                let mut set = SharedHolders::new(mode);
                set.put(holding, deadline).expect("fences are unique");
                self.value = Some((LockValue::Shared(set), deadline));
            }
        }
    }

    fn renew(&mut self, token: &[u8], deadline: i64) {
        match &mut self.value {
            Some((LockValue::Shared(set), _)) => {
                set.set_deadline(token, deadline);
            }
            Some((LockValue::Exclusive(_) | LockValue::Once(_), key_deadline)) => {
                *key_deadline = deadline
            }
            None => {}
        }
    }

    fn release(&mut self, token: &[u8], now: i64) {
        let gone = match &mut self.value {
            Some((LockValue::Shared(set), _)) => {
                if set.live_holder(token, now).is_some() {
                    set.remove(token);
                }
                set.is_empty()
            }
            Some((LockValue::Exclusive(held), _)) => held.is_token(token),
            Some((LockValue::Once(record), _)) => record
                .running_holding()
                .is_some_and(|held| held.is_token(token)),
            None => false,
        };
        if gone {
            self.value = None;
        }
    }
}

proptest! {
    #[test]
    fn holders_never_exceed_what_their_mode_admits(steps in proptest::collection::vec(step(), 1..80)) {
        let mut model = Model::default();
        let mut clock = FenceClock::new();
        let (mut now, mut last_fence) = (1_000i64, 0u64);
        for step in steps {
            model.settle(now);
            match step {
                Step::Acquire { token, mode, ttl } => {
                    let token = [b'a' + token];
                    let held_mode = model.current().map(|held| held.mode());
                    let renewing = model.current().and_then(|held| held.fence_of(&token, now));
                    let request = AcquireRequest { token: &token, mode, max_holders: MAX_HOLDERS, queued_before: false, fresh_token: false, session: None };
                    let outcome = acquire(model.current(), &request, &mut clock, 0, now);
                    match outcome {
                        Acquire::Granted { fence } => {
                            prop_assert!(fence > last_fence, "fences rise: {} after {}", fence, last_fence);
                            prop_assert!(renewing.is_none());
                            prop_assert!(held_mode.is_none_or(|held| held == mode));
                            last_fence = fence;
                            model.grant(&token, fence, now + ttl, mode);
                        }
                        Acquire::Renewed { fence } => {
                            prop_assert_eq!(Some(fence), renewing, "a renewal keeps its fence");
                            prop_assert_eq!(held_mode, Some(mode));
                            model.renew(&token, now + ttl);
                        }
                        Acquire::WrongMode(held) => {
                            prop_assert_eq!(Some(held), held_mode);
                            prop_assert!(held.is_shared() || renewing.is_some(), "an exclusive lock is busy, not another mode");
                            prop_assert_ne!(held, mode);
                        }
                        Acquire::Busy => prop_assert!(held_mode.is_some()),
                        Acquire::FencesExhausted => prop_assert!(false, "the clock never runs out here"),
                        Acquire::WrongSession => prop_assert!(false, "no sessions here"),
                    }
                }
                Step::Release { token } => model.release(&[b'a' + token], now),
                Step::Wait { ms } => now += ms,
            }
            model.settle(now);
            if let Some(held) = model.current() {
                let live = held.live_holders(now);
                let limit = match held.mode() {
                    Mode::Exclusive => 1,
                    Mode::Shared => MAX_HOLDERS,
                    Mode::Semaphore(n) => n as usize,
                };
                prop_assert!(live <= limit, "{} live holders in {:?}", live, held.mode());
            }
        }
    }
}
