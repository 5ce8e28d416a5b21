//! Fences that something checks: the rules of `LOCK.GUARD` (run a command only while a
//! token holds the lock) and `LOCK.FENCED` (run a command only with a fence at least the
//! highest admitted so far, Kleppmann's storage-side check), decided without Redis.

use crate::args::{parse_integer, parse_options_and_flags};
use crate::error::CommandError;
use crate::slot::key_slot;

/// What `LOCK.FENCED` does with a fence, given the mark's highest admitted fence.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Run the command; `raise` when the mark must move up to the fence first.
    Admit { raise: bool },
    /// Below the mark: nothing runs.
    Stale { highest: u64 },
}

/// Equal fences are admitted: one holder may write several times. A missing mark may
/// be one the server evicted, so it admits no fence below `floor`, the highest fence of
/// any mark evicted on this node (0 when none was): the server cannot tell an evicted
/// mark from one never made.
pub fn admit(highest: Option<u64>, floor: u64, fence: u64) -> Admission {
    match highest {
        Some(highest) if fence < highest => Admission::Stale { highest },
        Some(highest) => Admission::Admit {
            raise: fence > highest,
        },
        None if fence < floor => Admission::Stale { highest: floor },
        None => Admission::Admit { raise: true },
    }
}

/// A fence argument: a positive integer.
pub fn parse_fence(bytes: &[u8]) -> Result<u64, CommandError> {
    parse_integer(bytes)
        .ok()
        .and_then(|fence| u64::try_from(fence).ok())
        .filter(|&fence| fence > 0)
        .ok_or(CommandError::NotAnInteger)
}

/// A value of the node's state in `LOCK.CLOCK` (a last fence or a mark floor): a fence,
/// or 0 for none yet.
pub fn parse_node_fence(bytes: &[u8]) -> Result<u64, CommandError> {
    match bytes {
        b"0" => Ok(0),
        _ => parse_fence(bytes),
    }
}

/// Commands a guard or a fence check may not run, beyond what Redis refuses in script
/// mode: themselves (a guard inside a guard proves nothing more), and a waiting
/// `LOCK.ACQUIRE … BLOCK` (a guard is one atomic step; it cannot wait).
pub fn allowed_inside(command: &[u8], args: &[&[u8]]) -> Result<(), CommandError> {
    let is = |name: &str| command.eq_ignore_ascii_case(name.as_bytes());
    let waits = is("lock.acquire") && acquire_waits(args);
    if is("lock.guard") || is("lock.fenced") || waits {
        Err(CommandError::NotAllowedInside)
    } else {
        Ok(())
    }
}

/// Whether `LOCK.ACQUIRE`'s arguments (key, ttl, options) ask to wait: a `BLOCK`
/// option, read as the command reads its options (a token that is the word `BLOCK`
/// asks for nothing). Options it would refuse are its own error to give.
fn acquire_waits(args: &[&[u8]]) -> bool {
    let options = args.get(2..).unwrap_or_default();
    match parse_options_and_flags(options, ["TOKEN", "BLOCK", "LIMIT"], ["SHARED"]) {
        Ok(([_, block, _], _)) => block.is_some(),
        Err(_) => false,
    }
}

/// In a cluster, the inner command's keys must hash to the slot of the lock (or mark)
/// key. Redis checks this for a call from a client; a call from a script is checked
/// here, before anything runs (Valkey 9.1 was seen to stay broken after a cross-slot
/// call from inside a script).
pub fn same_slot(first: &[u8], inner_keys: &[&[u8]]) -> Result<(), CommandError> {
    let slot = key_slot(first);
    if inner_keys.iter().all(|key| key_slot(key) == slot) {
        Ok(())
    } else {
        Err(CommandError::CrossSlot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_keys_must_share_the_slot_of_the_lock() {
        assert_eq!(same_slot(b"lock:{a}", &[b"{a}:x", b"x{a}"]), Ok(()));
        assert_eq!(same_slot(b"lock:{a}", &[]), Ok(()));
        assert_eq!(
            same_slot(b"lock:{a}", &[b"{b}:x"]),
            Err(CommandError::CrossSlot)
        );
    }

    #[test]
    fn fences_at_or_above_the_mark_are_admitted() {
        assert_eq!(admit(None, 0, 5), Admission::Admit { raise: true });
        assert_eq!(admit(Some(5), 0, 5), Admission::Admit { raise: false });
        assert_eq!(admit(Some(5), 0, 9), Admission::Admit { raise: true });
        assert_eq!(admit(Some(5), 0, 4), Admission::Stale { highest: 5 });
    }

    #[test]
    fn a_missing_mark_admits_nothing_below_the_floor_of_evicted_marks() {
        assert_eq!(admit(None, 100, 50), Admission::Stale { highest: 100 });
        assert_eq!(admit(None, 100, 100), Admission::Admit { raise: true });
        assert_eq!(admit(None, 100, 101), Admission::Admit { raise: true });
        // A mark that exists is its own authority, even below the floor.
        assert_eq!(admit(Some(7), 100, 7), Admission::Admit { raise: false });
        assert_eq!(admit(Some(7), 100, 6), Admission::Stale { highest: 7 });
    }

    #[test]
    fn a_fence_is_a_positive_integer() {
        assert_eq!(parse_fence(b"17"), Ok(17));
        for bad in [&b"0"[..], b"-3", b"x", b"", b"1.5"] {
            assert_eq!(parse_fence(bad), Err(CommandError::NotAnInteger), "{bad:?}");
        }
    }

    #[test]
    fn node_state_values_are_fences_or_zero() {
        assert_eq!(parse_node_fence(b"0"), Ok(0));
        assert_eq!(parse_node_fence(b"42"), Ok(42));
        for bad in [&b"-1"[..], b"00", b"x", b"", b"9223372036854775808"] {
            assert_eq!(
                parse_node_fence(bad),
                Err(CommandError::NotAnInteger),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn guards_do_not_nest_or_wait() {
        assert!(allowed_inside(b"SET", &[b"k", b"v"]).is_ok());
        assert!(allowed_inside(b"lock.acquire", &[b"k", b"100"]).is_ok());
        assert_eq!(
            allowed_inside(b"LOCK.ACQUIRE", &[b"k", b"100", b"block", b"0"]),
            Err(CommandError::NotAllowedInside)
        );
        // A token spelled BLOCK asks for no wait.
        assert!(allowed_inside(b"lock.acquire", &[b"k", b"100", b"TOKEN", b"BLOCK"]).is_ok());
        assert_eq!(
            allowed_inside(
                b"lock.acquire",
                &[b"k", b"100", b"TOKEN", b"BLOCK", b"BLOCK", b"5"]
            ),
            Err(CommandError::NotAllowedInside)
        );
        assert_eq!(
            allowed_inside(b"Lock.Guard", &[]),
            Err(CommandError::NotAllowedInside)
        );
        assert_eq!(
            allowed_inside(b"lock.fenced", &[]),
            Err(CommandError::NotAllowedInside)
        );
    }

    #[test]
    fn refusals_are_worded_exactly() {
        assert_eq!(
            CommandError::Stale(42).message(),
            "STALE fence is below the highest admitted (42)"
        );
        assert_eq!(
            CommandError::NotHeld.message(),
            "NOTHELD this token does not hold the lock"
        );
    }
}
