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

/// Commands that always wait for something: a guard may run none of them. (Redis 7.0
/// refuses some in script mode and runs others without waiting; newer servers run all
/// without waiting: one rule for every server instead.)
const BLOCKING: [&str; 12] = [
    "blpop",
    "brpop",
    "brpoplpush",
    "blmove",
    "blmpop",
    "bzpopmin",
    "bzpopmax",
    "bzmpop",
    "wait",
    "waitaof",
    "xread",
    "xreadgroup",
];

/// Commands a guard or a fence check may not run, beyond what Redis refuses in script
/// mode: themselves (a guard inside a guard proves nothing more), and any command that
/// waits (a guard is one atomic step; it cannot wait): a `LOCK.ACQUIRE … BLOCK` or
/// `LOCK.ONCE … BLOCK`, a blocking list, sorted-set or `WAIT` command,
/// `XREAD`/`XREADGROUP` with `BLOCK`, and the vector-set commands that may wait for a
/// thread.
pub fn allowed_inside(command: &[u8], args: &[&[u8]]) -> Result<(), CommandError> {
    let is = |name: &str| command.eq_ignore_ascii_case(name.as_bytes());
    let waits = if is("lock.acquire") {
        acquire_waits(args.get(2..))
    } else if is("lock.acquireall") {
        acquire_all_waits(args)
    } else if is("lock.once") {
        once_waits(args.get(2..))
    } else if is("xread") || is("xreadgroup") {
        stream_read_waits(is("xreadgroup"), args)
    } else if is("vsim") || is("vadd") {
        // Redis 8's vector search (and `VADD … CAS`) runs in a thread and waits for it,
        // which Redis's command table does not say. Telling the forms that stay on the
        // main thread apart means parsing their whole grammar (an element, key or vector
        // may be spelled NOTHREAD or CAS), so neither runs inside a guard.
        true
    } else {
        BLOCKING.iter().any(|name| is(name))
    };
    if is("lock.guard") || is("lock.fenced") || waits {
        Err(CommandError::NotAllowedInside)
    } else {
        Ok(())
    }
}

/// Commands that remove keys without naming them: a fence check may not run them, since
/// they would take its own mark with them (and a missing mark admits older fences).
pub fn empties_databases(command: &[u8]) -> bool {
    ["flushdb", "flushall", "swapdb"]
        .iter()
        .any(|name| command.eq_ignore_ascii_case(name.as_bytes()))
}

/// Whether `XREAD`/`XREADGROUP`'s options (before `STREAMS`) include `BLOCK`: read
/// option by option, so a group, consumer or count spelled `BLOCK` asks for nothing.
fn stream_read_waits(group: bool, args: &[&[u8]]) -> bool {
    // XREADGROUP GROUP group consumer …
    let mut at = if group { 3 } else { 0 };
    while let Some(option) = args.get(at) {
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        if is("block") {
            return true;
        }
        at += match () {
            _ if is("count") => 2,
            _ if is("noack") => 1,
            _ => return false,
        };
    }
    false
}

/// Whether an acquire's options ask to wait: a `BLOCK` option, read as the command
/// reads its options (a token or session that is the word `BLOCK` asks for nothing).
/// Options it would refuse are its own error to give.
fn acquire_waits(options: Option<&[&[u8]]>) -> bool {
    let options = options.unwrap_or_default();
    let names = ["TOKEN", "BLOCK", "LIMIT", "SESSION", "LOCKDELAY"];
    match parse_options_and_flags(options, names, ["SHARED"]) {
        Ok(([_, block, ..], _)) => block.is_some(),
        Err(_) => false,
    }
}

/// Whether a run-once claim's options ask to wait, read as `acquire_waits`.
fn once_waits(options: Option<&[&[u8]]>) -> bool {
    let options = options.unwrap_or_default();
    let names = ["KEEP", "BLOCK", "TOKEN", "SESSION", "FINGERPRINT"];
    match parse_options_and_flags(options, names, []) {
        Ok(([_, block, ..], _)) => block.is_some(),
        Err(_) => false,
    }
}

/// Whether `LOCK.ACQUIREALL`'s arguments (numkeys, keys, ttl, options) ask to wait.
fn acquire_all_waits(args: &[&[u8]]) -> bool {
    let keys = args
        .first()
        .and_then(|numkeys| parse_integer(numkeys).ok())
        .and_then(|numkeys| usize::try_from(numkeys).ok());
    keys.is_some_and(|keys| acquire_waits(args.get(keys.saturating_add(2)..)))
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
    fn guards_run_no_command_that_waits() {
        for blocking in [&b"BLPOP"[..], b"bzpopmin", b"Wait", b"BLMPOP", b"waitaof"] {
            assert_eq!(
                allowed_inside(blocking, &[b"k", b"0"]),
                Err(CommandError::NotAllowedInside),
                "{blocking:?}"
            );
        }
        let xread = |args: &[&[u8]]| allowed_inside(b"XREAD", args);
        assert!(xread(&[b"STREAMS", b"s", b"0"]).is_ok());
        assert!(xread(&[b"COUNT", b"5", b"STREAMS", b"block", b"0"]).is_ok());
        assert_eq!(
            xread(&[b"COUNT", b"5", b"block", b"0", b"STREAMS", b"s", b"$"]),
            Err(CommandError::NotAllowedInside)
        );
        let group = |args: &[&[u8]]| allowed_inside(b"xreadgroup", args);
        assert!(group(&[b"GROUP", b"BLOCK", b"BLOCK", b"NOACK", b"STREAMS", b"s", b">"]).is_ok());
        assert_eq!(
            group(&[b"GROUP", b"g", b"c", b"NOACK", b"BLOCK", b"10", b"STREAMS", b"s", b">"]),
            Err(CommandError::NotAllowedInside)
        );
        assert!(allowed_inside(b"LPOP", &[b"k"]).is_ok());
        for vector in [&b"VSIM"[..], b"vadd"] {
            assert_eq!(
                allowed_inside(vector, &[b"v", b"ELE", b"a", b"NOTHREAD"]),
                Err(CommandError::NotAllowedInside)
            );
        }
    }

    #[test]
    fn whole_database_removals_are_told_apart() {
        for command in [&b"FLUSHDB"[..], b"flushall", b"SwapDb"] {
            assert!(empties_databases(command), "{command:?}");
        }
        assert!(!empties_databases(b"DEL"));
    }

    #[test]
    fn guards_do_not_nest_or_wait() {
        assert!(allowed_inside(b"SET", &[b"k", b"v"]).is_ok());
        assert!(allowed_inside(b"lock.acquire", &[b"k", b"100"]).is_ok());
        assert!(allowed_inside(b"lock.once", &[b"k", b"100", b"KEEP", b"5"]).is_ok());
        assert_eq!(
            allowed_inside(b"LOCK.ONCE", &[b"k", b"100", b"KEEP", b"5", b"BLOCK", b"0"]),
            Err(CommandError::NotAllowedInside)
        );
        assert!(allowed_inside(
            b"lock.once",
            &[b"k", b"1", b"TOKEN", b"BLOCK", b"KEEP", b"5"]
        )
        .is_ok());
        assert_eq!(
            allowed_inside(b"LOCK.ACQUIRE", &[b"k", b"100", b"block", b"0"]),
            Err(CommandError::NotAllowedInside)
        );
        // A token spelled BLOCK asks for no wait.
        assert!(allowed_inside(b"lock.acquire", &[b"k", b"100", b"TOKEN", b"BLOCK"]).is_ok());
        assert_eq!(
            allowed_inside(
                b"lock.acquire",
                &[b"k", b"1", b"SESSION", b"s", b"BLOCK", b"0"]
            ),
            Err(CommandError::NotAllowedInside)
        );
        let all = |args: &[&[u8]]| allowed_inside(b"LOCK.ACQUIREALL", args);
        assert!(all(&[b"2", b"a", b"b", b"100"]).is_ok());
        assert!(
            all(&[b"2", b"a", b"BLOCK", b"100"]).is_ok(),
            "a key named BLOCK"
        );
        assert_eq!(
            all(&[b"2", b"a", b"b", b"100", b"BLOCK", b"0"]),
            Err(CommandError::NotAllowedInside)
        );
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
