//! What `LOCK.OBSERVE` reports of a lock, and when an observer has something to hear:
//! the state of a lock as `[fence, value]` (the exclusive holder's fence and public
//! value, the highest live shared fence without a value, or `[0, nil]` when nobody
//! holds it), compared with the state the caller says it knows. Pure: the module
//! reads the lock and the clock and asks here.

use crate::args;
use crate::error::CommandError;
use crate::fence_checks::parse_node_fence;
use crate::value::LockRef;

/// A lock's state as observers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The exclusive holder's fence, the highest live shared holder's, or 0 for none.
    pub fence: u64,
    /// The exclusive holder's value (empty when it never set one); `None` when no
    /// holding is exclusive (free, quarantined, or held shared).
    pub value: Option<Vec<u8>>,
}

impl Observed {
    /// Nobody holds the lock.
    pub const FREE: Observed = Observed {
        fence: 0,
        value: None,
    };

    /// The state of `lock` (`None`: no lock at the key) at `now_ms`.
    pub fn of(lock: Option<LockRef>, now_ms: i64) -> Self {
        match lock {
            Some(LockRef::Exclusive(holding)) => Observed {
                fence: holding.fence(),
                value: Some(holding.value().unwrap_or_default().to_vec()),
            },
            Some(LockRef::Shared(set)) => match set.highest_fence(now_ms) {
                Some(fence) => Observed { fence, value: None },
                None => Observed::FREE,
            },
            Some(LockRef::Quarantined(_)) | None => Observed::FREE,
        }
    }

    /// Whether this is the state a caller knows as `known` (nil is known as "").
    pub fn is(&self, known: &Known) -> bool {
        self.fence == known.fence && self.value.as_deref().unwrap_or_default() == known.value
    }
}

/// The state a caller says it knows: `fence value`, the free state as `0 ""`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Known {
    pub fence: u64,
    pub value: Vec<u8>,
}

impl From<&Observed> for Known {
    fn from(observed: &Observed) -> Self {
        Known {
            fence: observed.fence,
            value: observed.value.clone().unwrap_or_default(),
        }
    }
}

/// `LOCK.OBSERVE key [fence value] [BLOCK timeout-ms]`, after the key.
#[derive(Debug, PartialEq, Eq)]
pub struct ObserveArgs {
    /// What the caller knows; `None`: answer now.
    pub known: Option<Known>,
    /// `BLOCK` timeout in ms (0: no limit).
    pub block_ms: Option<i64>,
}

/// Parses what follows the key. A first argument that is `BLOCK` starts the options
/// (a fence is a number, so the two never mix).
pub fn parse(rest: &[&[u8]]) -> Result<ObserveArgs, CommandError> {
    let (known, options) = match rest {
        [first, ..] if first.eq_ignore_ascii_case(b"BLOCK") => (None, rest),
        [fence, value, options @ ..] => {
            let fence = parse_node_fence(fence).map_err(|_| CommandError::InvalidFence)?;
            let known = Known {
                fence,
                value: value.to_vec(),
            };
            (Some(known), options)
        }
        [] => (None, rest),
        [_] => return Err(CommandError::Syntax),
    };
    let [block] = args::parse_options(options, ["BLOCK"])?;
    let block_ms = block.map(args::parse_timeout).transpose()?;
    Ok(ObserveArgs { known, block_ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holding::{Extras, Holding};

    fn known(fence: u64, value: &[u8]) -> Known {
        Known {
            fence,
            value: value.to_vec(),
        }
    }

    #[test]
    fn a_holder_shows_its_fence_and_value_and_nobody_shows_zero_and_nil() {
        let plain = Holding::pack(b"t", 7).unwrap();
        let seen = Observed::of(Some(LockRef::Exclusive(&plain)), 0);
        assert_eq!(seen.fence, 7);
        assert_eq!(seen.value.as_deref(), Some(&b""[..]));
        assert!(seen.is(&known(7, b"")));
        assert!(!seen.is(&known(0, b"")));
        let extras = Extras {
            value: Some(b"10.0.0.1"),
            ..Extras::default()
        };
        let valued = Holding::pack_with(b"t", 8, extras).unwrap();
        let seen = Observed::of(Some(LockRef::Exclusive(&valued)), 0);
        assert!(seen.is(&known(8, b"10.0.0.1")));
        assert!(!seen.is(&known(8, b"10.0.0.2")));
        assert_eq!(Observed::of(None, 0), Observed::FREE);
        assert_eq!(
            Observed::of(Some(LockRef::Quarantined(&valued)), 0),
            Observed::FREE
        );
        assert!(Observed::FREE.is(&Known::default()));
        assert_eq!(Known::from(&seen), known(8, b"10.0.0.1"));
    }

    #[test]
    fn a_shared_lock_shows_its_highest_live_fence_without_a_value() {
        let mut set = crate::shared::SharedHolders::new(crate::mode::Mode::Shared);
        set.insert(Holding::pack(b"a", 3).unwrap(), 1_000).unwrap();
        set.insert(Holding::pack(b"b", 4).unwrap(), 500).unwrap();
        let seen = Observed::of(Some(LockRef::Shared(&set)), 100);
        assert_eq!(
            seen,
            Observed {
                fence: 4,
                value: None
            }
        );
        assert!(seen.is(&known(4, b"")));
        let later = Observed::of(Some(LockRef::Shared(&set)), 600);
        assert_eq!(later.fence, 3, "the newest reader's lease ended");
        assert_eq!(
            Observed::of(Some(LockRef::Shared(&set)), 2_000),
            Observed::FREE
        );
    }

    #[test]
    fn arguments_are_a_known_state_then_block() {
        let parsed = |rest: &[&[u8]]| parse(rest);
        assert_eq!(
            parsed(&[]),
            Ok(ObserveArgs {
                known: None,
                block_ms: None
            })
        );
        assert_eq!(
            parsed(&[b"12", b"host", b"block", b"0"]),
            Ok(ObserveArgs {
                known: Some(known(12, b"host")),
                block_ms: Some(0)
            })
        );
        assert_eq!(
            parsed(&[b"BLOCK", b"100"]),
            Ok(ObserveArgs {
                known: None,
                block_ms: Some(100)
            })
        );
        assert_eq!(
            parsed(&[b"0", b""]).map(|a| a.known),
            Ok(Some(Known::default()))
        );
        assert_eq!(parsed(&[b"12"]), Err(CommandError::Syntax));
        assert_eq!(parsed(&[b"-1", b"x"]), Err(CommandError::InvalidFence));
        assert_eq!(parsed(&[b"x1", b"x"]), Err(CommandError::InvalidFence));
        assert_eq!(
            parsed(&[b"1", b"x", b"BLOCK", b"-5"]),
            Err(CommandError::NegativeTimeout)
        );
        assert_eq!(parsed(&[b"1", b"x", b"BLOCK"]), Err(CommandError::Syntax));
        assert_eq!(
            parsed(&[b"1", b"x", b"BLOCK", b"1", b"BLOCK", b"1"]),
            Err(CommandError::Syntax)
        );
        assert_eq!(parsed(&[b"1", b"x", b"NOW"]), Err(CommandError::Syntax));
    }
}
