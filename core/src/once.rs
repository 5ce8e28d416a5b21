//! Run once (`LOCK.ONCE` / `LOCK.DONE`): a lock that remembers its outcome. Pure: no
//! Redis types, time passed in.
//!
//! A key goes free → running → done → free. *Running* is an exclusive holding (the run's
//! token, fence, lease and session) with the claim's keep time and fingerprint: every
//! command that works on a mutex works on it. *Done* is what `LOCK.DONE` leaves: the
//! run's fence, its fingerprint and its result, until the keep time after it was stored
//! (the key's expiry); it holds nothing and admits no lock, and every claim of the key
//! is answered with its result. A running claim that ends without `DONE` (release,
//! lease end, `LOCK.CLOSE`, a dead session) leaves the key free: the next claim runs
//! again, under a higher fence.
//!
//! The record sits behind the same thin pointer as every lock value (`value`), told
//! apart by its first eight bytes, `ONCE_TAG`, which is neither a fence (at most
//! `i64::MAX`) nor the shared tag (0).

use crate::args::parse_ttl;
use crate::error::CommandError;
use crate::holding::Holding;
use crate::lock_ref::LockRef;

/// The first eight bytes of a run-once record.
pub const ONCE_TAG: u64 = u64::MAX;

/// The token a done record's holding carries: a done record is held by nobody, and no
/// command ever compares a token with it (it reads as quarantined).
const DONE_TOKEN: &[u8] = b"-";

/// A run-once record: a running claim or a done one. `repr(C)` keeps the tag first.
#[repr(C)]
#[derive(Debug)]
pub struct OnceRecord {
    /// Read only through the value's pointer (`value::LockValue::from_raw`).
    #[allow(dead_code)]
    tag: u64,
    /// The run's holding: the holder's while running; of a done record, only its fence
    /// counts (its token is `DONE_TOKEN`).
    holding: Box<Holding>,
    /// How long a result is kept once stored (ms).
    keep_ms: u64,
    /// The claim's fingerprint (what the request was about), if it gave one.
    fingerprint: Option<Box<[u8]>>,
    /// The stored result, once done.
    result: Option<Box<[u8]>>,
}

impl OnceRecord {
    /// A running claim: `holding` runs it, and its result is to be kept `keep_ms`.
    pub fn running(holding: Box<Holding>, keep_ms: u64, fingerprint: Option<&[u8]>) -> Box<Self> {
        Box::new(OnceRecord {
            tag: ONCE_TAG,
            holding,
            keep_ms,
            fingerprint: fingerprint.map(Box::from),
            result: None,
        })
    }

    /// A done record: the run under `fence` produced `result`. `None` for fence 0.
    pub fn done(
        fence: u64,
        keep_ms: u64,
        fingerprint: Option<&[u8]>,
        result: &[u8],
    ) -> Option<Box<Self>> {
        Some(Box::new(OnceRecord {
            tag: ONCE_TAG,
            holding: Holding::pack(DONE_TOKEN, fence)?,
            keep_ms,
            fingerprint: fingerprint.map(Box::from),
            result: Some(Box::from(result)),
        }))
    }

    /// Whether the run is over and its result stored.
    pub fn is_done(&self) -> bool {
        self.result.is_some()
    }

    /// The fence of the run (running or done).
    pub fn fence(&self) -> u64 {
        self.holding.fence()
    }

    pub fn keep_ms(&self) -> u64 {
        self.keep_ms
    }

    pub fn fingerprint(&self) -> Option<&[u8]> {
        self.fingerprint.as_deref()
    }

    pub fn result(&self) -> Option<&[u8]> {
        self.result.as_deref()
    }

    /// The running holder's holding (`None` once done).
    pub fn running_holding(&self) -> Option<&Holding> {
        (!self.is_done()).then_some(&*self.holding)
    }

    /// The running holder's holding, to change it in place (`None` once done).
    pub fn running_holding_mut(&mut self) -> Option<&mut Holding> {
        if self.is_done() {
            None
        } else {
            Some(&mut self.holding)
        }
    }

    /// Replaces the running holding (a same-token retry that set its value); `false`
    /// (and nothing changed) once done.
    pub fn replace_running(&mut self, holding: Box<Holding>) -> bool {
        if self.is_done() {
            return false;
        }
        self.holding = holding;
        true
    }

    /// How the rest of the module sees the record: a running claim is an exclusive
    /// lock; a done record holds nothing and admits nobody, as a quarantine.
    pub fn as_lock(&self) -> LockRef<'_> {
        if self.is_done() {
            LockRef::Quarantined(&self.holding)
        } else {
            LockRef::Exclusive(&self.holding)
        }
    }

    /// Bytes allocated for the record (for `MEMORY USAGE`).
    pub fn allocated_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.holding.allocated_bytes()
            + self.fingerprint.as_deref().map_or(0, <[u8]>::len)
            + self.result.as_deref().map_or(0, <[u8]>::len)
    }
}

/// What a claim finds at its key.
#[derive(Clone, Copy, Debug)]
pub enum Found<'a> {
    Free,
    /// A running claim.
    Running {
        holding: &'a Holding,
        fingerprint: Option<&'a [u8]>,
    },
    /// A done record.
    Done {
        fence: u64,
        fingerprint: Option<&'a [u8]>,
        result: &'a [u8],
    },
    /// A plain lock (any mode), or a quarantine: it is busy for a claim as a running
    /// claim would be.
    Held,
}

impl<'a> Found<'a> {
    /// What a key holding `lock` (its record `once`, if it is one) is to a claim.
    pub fn of(lock: Option<LockRef<'a>>, once: Option<&'a OnceRecord>) -> Self {
        match (once, lock) {
            (Some(record), _) => match record.result() {
                Some(result) => Found::Done {
                    fence: record.fence(),
                    fingerprint: record.fingerprint(),
                    result,
                },
                None => Found::Running {
                    holding: &record.holding,
                    fingerprint: record.fingerprint(),
                },
            },
            (None, None) => Found::Free,
            (None, Some(_)) => Found::Held,
        }
    }
}

/// What a claim asks.
#[derive(Clone, Copy, Debug)]
pub struct ClaimRequest<'a> {
    /// Its chosen token (`TOKEN`), if any: the same token retrying a running claim is
    /// its holder again.
    pub token: Option<&'a [u8]>,
    pub fingerprint: Option<&'a [u8]>,
    /// The session it asks for.
    pub session: Option<&'a [u8]>,
    /// Others wait for the key: a free key goes to them first.
    pub queued_before: bool,
}

/// What a claim does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimStep<'a> {
    /// Nobody ran it or runs it: the caller runs it (a grant with a fresh fence).
    Run,
    /// The caller's own token runs it already: its lease restarts, its fence stays.
    Renew { fence: u64 },
    /// It runs (or the key is held): nil, or wait.
    Busy,
    /// It is done: `[nil, fence, result]`.
    Replay { fence: u64, result: &'a [u8] },
    /// The key was claimed with another fingerprint.
    FingerprintRefused,
    /// The same token runs it under another session.
    WrongSession,
}

/// Whether a claim's fingerprint agrees with the stored one: a claim without one
/// matches any, and so does a record without one.
pub fn fingerprint_matches(stored: Option<&[u8]>, asked: Option<&[u8]>) -> bool {
    match (stored, asked) {
        (Some(stored), Some(asked)) => crate::token::tokens_match(stored, asked),
        _ => true,
    }
}

/// Whether a claim may use its fingerprint here: one within today's
/// `fencelock.max-token-length` (`max_len`), or the very one the key was claimed with,
/// stored under an earlier, larger limit (as a holder keeps working with its token).
/// Any other fingerprint over the limit is refused as invalid: no new record stores it.
pub fn fingerprint_admitted(found: Found, asked: Option<&[u8]>, max_len: usize) -> bool {
    let Some(asked) = asked.filter(|asked| asked.len() > max_len) else {
        return true;
    };
    let stored = match found {
        Found::Running { fingerprint, .. } | Found::Done { fingerprint, .. } => fingerprint,
        Found::Free | Found::Held => None,
    };
    stored.is_some_and(|stored| crate::token::tokens_match(stored, asked))
}

/// Decides a claim. A changed fingerprint is refused first, while running and while
/// done, as a changed payload is under an idempotency key.
pub fn claim_step<'a>(found: Found<'a>, request: &ClaimRequest) -> ClaimStep<'a> {
    match found {
        Found::Free if request.queued_before => ClaimStep::Busy,
        Found::Free => ClaimStep::Run,
        Found::Held => ClaimStep::Busy,
        Found::Running {
            holding,
            fingerprint,
        } => {
            if !fingerprint_matches(fingerprint, request.fingerprint) {
                ClaimStep::FingerprintRefused
            } else if request.token.is_some_and(|token| holding.is_token(token)) {
                if holding.in_session(request.session) {
                    ClaimStep::Renew {
                        fence: holding.fence(),
                    }
                } else {
                    ClaimStep::WrongSession
                }
            } else {
                ClaimStep::Busy
            }
        }
        Found::Done {
            fence,
            fingerprint,
            result,
        } => {
            if fingerprint_matches(fingerprint, request.fingerprint) {
                ClaimStep::Replay { fence, result }
            } else {
                ClaimStep::FingerprintRefused
            }
        }
    }
}

/// What `LOCK.DONE key token result` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoneStep {
    /// The token runs the claim: the record becomes done with the run's fence.
    Store { fence: u64 },
    /// It does not (any more): 0, nothing changes.
    NotHolder,
}

/// Decides `LOCK.DONE`: only the running holder stores a result.
pub fn done_step(found: Found, token: &[u8]) -> DoneStep {
    match found {
        Found::Running { holding, .. } if holding.is_token(token) => DoneStep::Store {
            fence: holding.fence(),
        },
        _ => DoneStep::NotHolder,
    }
}

/// A result of `len` bytes is refused above `max_len` (`fencelock.max-result-length`).
pub fn check_result(len: usize, max_len: usize) -> Result<(), CommandError> {
    if len > max_len {
        Err(CommandError::ResultTooLong)
    } else {
        Ok(())
    }
}

/// The longest keep time any claim may ask for, whatever `fencelock.max-ttl` says:
/// half the range of Unix ms, so that a result stored at any time a server clock can
/// show (before the first half of that range runs out, some 146 million years from
/// 1970) still gets an expiry (`kept_until`). A longer one would make a run that
/// `LOCK.DONE` cannot finish.
pub const MAX_KEEP_MS: i64 = i64::MAX / 2;

/// A keep time in ms: an integer (else not-an-integer), from 1 to `max_keep_ms` and
/// `MAX_KEEP_MS` (else invalid-expire for `command`). `LOCK.ONCE` passes its
/// `fencelock.max-ttl`; `LOCK.RECORD`, the replication form, any keep a primary's
/// claim could have had (`i64::MAX`): a replica may run with a lower `max-ttl`.
pub fn parse_keep(
    bytes: &[u8],
    command: &'static str,
    max_keep_ms: i64,
) -> Result<u64, CommandError> {
    let keep = parse_ttl(bytes, command, max_keep_ms.min(MAX_KEEP_MS))?;
    u64::try_from(keep).map_err(|_| CommandError::InvalidExpire(command))
}

/// When a result stored at `now_ms` and kept `keep_ms` goes (Unix ms, the key's
/// expiry); `None` if it overflows.
pub fn kept_until(now_ms: i64, keep_ms: u64) -> Option<i64> {
    now_ms.checked_add(i64::try_from(keep_ms).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holding::Extras;

    fn running(token: &str, fence: u64, fingerprint: Option<&str>) -> Box<OnceRecord> {
        OnceRecord::running(
            Holding::pack(token.as_bytes(), fence).unwrap(),
            5_000,
            fingerprint.map(str::as_bytes),
        )
    }

    fn ask<'a>(token: Option<&'a str>, fingerprint: Option<&'a str>) -> ClaimRequest<'a> {
        ClaimRequest {
            token: token.map(str::as_bytes),
            fingerprint: fingerprint.map(str::as_bytes),
            session: None,
            queued_before: false,
        }
    }

    fn step_on<'a>(record: &'a OnceRecord, request: &ClaimRequest) -> ClaimStep<'a> {
        claim_step(Found::of(Some(record.as_lock()), Some(record)), request)
    }

    #[test]
    fn a_free_key_runs_unless_others_wait_for_it() {
        assert_eq!(claim_step(Found::Free, &ask(None, None)), ClaimStep::Run);
        let mut queued = ask(None, Some("f"));
        queued.queued_before = true;
        assert_eq!(claim_step(Found::Free, &queued), ClaimStep::Busy);
    }

    #[test]
    fn a_running_claim_is_busy_for_duplicates_and_renews_for_its_holder() {
        let record = running("t", 7, Some("fp"));
        assert_eq!(step_on(&record, &ask(None, None)), ClaimStep::Busy);
        assert_eq!(
            step_on(&record, &ask(Some("u"), Some("fp"))),
            ClaimStep::Busy
        );
        assert_eq!(
            step_on(&record, &ask(Some("t"), Some("fp"))),
            ClaimStep::Renew { fence: 7 }
        );
        assert_eq!(
            step_on(&record, &ask(Some("t"), None)),
            ClaimStep::Renew { fence: 7 },
            "a claim without a fingerprint matches any"
        );
        let mut other_session = ask(Some("t"), None);
        other_session.session = Some(b"s");
        assert_eq!(step_on(&record, &other_session), ClaimStep::WrongSession);
    }

    #[test]
    fn another_fingerprint_is_refused_while_running_and_while_done() {
        let record = running("t", 7, Some("fp"));
        assert_eq!(
            step_on(&record, &ask(None, Some("other"))),
            ClaimStep::FingerprintRefused
        );
        assert_eq!(
            step_on(&record, &ask(Some("t"), Some("other"))),
            ClaimStep::FingerprintRefused
        );
        let done = OnceRecord::done(7, 1_000, Some(b"fp"), b"ok").unwrap();
        assert_eq!(
            step_on(&done, &ask(None, Some("other"))),
            ClaimStep::FingerprintRefused
        );
        let unmarked = running("t", 7, None);
        assert_eq!(
            step_on(&unmarked, &ask(None, Some("any"))),
            ClaimStep::Busy,
            "a record without a fingerprint refuses none"
        );
    }

    #[test]
    fn a_done_record_replays_its_result_and_fence_to_everybody() {
        let done = OnceRecord::done(42, 1_000, Some(b"fp"), b"order-17").unwrap();
        for request in [
            ask(None, None),
            ask(None, Some("fp")),
            ask(Some("any"), None),
        ] {
            assert_eq!(
                step_on(&done, &request),
                ClaimStep::Replay {
                    fence: 42,
                    result: b"order-17"
                }
            );
        }
        let empty = OnceRecord::done(3, 1, None, b"").unwrap();
        assert_eq!(
            step_on(&empty, &ask(None, None)),
            ClaimStep::Replay {
                fence: 3,
                result: b""
            },
            "an empty result is a result"
        );
    }

    #[test]
    fn a_plain_lock_is_busy_for_a_claim() {
        let plain = Holding::pack(b"p", 1).unwrap();
        let found = Found::of(Some(LockRef::Exclusive(&plain)), None);
        assert_eq!(claim_step(found, &ask(Some("p"), None)), ClaimStep::Busy);
    }

    #[test]
    fn only_the_running_holder_stores_a_result() {
        let record = running("t", 9, None);
        let found = Found::of(Some(record.as_lock()), Some(&record));
        assert_eq!(done_step(found, b"t"), DoneStep::Store { fence: 9 });
        assert_eq!(done_step(found, b"u"), DoneStep::NotHolder);
        assert_eq!(done_step(Found::Free, b"t"), DoneStep::NotHolder);
        let done = OnceRecord::done(9, 1, None, b"r").unwrap();
        let found = Found::of(Some(done.as_lock()), Some(&done));
        assert_eq!(done_step(found, b"-"), DoneStep::NotHolder, "twice: 0");
        let plain = Holding::pack(b"t", 9).unwrap();
        let found = Found::of(Some(LockRef::Exclusive(&plain)), None);
        assert_eq!(
            done_step(found, b"t"),
            DoneStep::NotHolder,
            "a plain lock is no claim"
        );
    }

    #[test]
    fn a_running_claim_reads_as_its_exclusive_lock_and_a_done_one_as_a_quarantine() {
        let record = running("t", 9, None);
        assert_eq!(record.as_lock().fence_of(b"t", 0), Some(9));
        assert!(!record.as_lock().is_quarantined());
        let done = OnceRecord::done(9, 1, None, b"r").unwrap();
        assert!(done.as_lock().is_quarantined());
        assert_eq!(done.as_lock().fence_of(b"-", 0), None);
        assert_eq!(done.as_lock().visible_fence(0), None);
        assert!(done.running_holding().is_none());
        assert_eq!(done.fence(), 9);
    }

    #[test]
    fn the_running_holding_changes_in_place_until_done() {
        let mut record = running("t", 9, Some("fp"));
        let session = Extras {
            session: Some(b"s"),
            ..Extras::default()
        };
        assert!(record.replace_running(Holding::pack_with(b"t", 9, session).unwrap()));
        assert!(record.running_holding().unwrap().in_session(Some(b"s")));
        assert!(record.running_holding_mut().is_some());
        let mut done = OnceRecord::done(9, 1, None, b"r").unwrap();
        assert!(done.running_holding_mut().is_none());
        assert!(!done.replace_running(Holding::pack(b"t", 9).unwrap()));
        assert!(OnceRecord::done(0, 1, None, b"r").is_none(), "fence 0");
    }

    #[test]
    fn a_fingerprint_over_the_limit_is_admitted_only_where_it_is_stored() {
        let long = "f".repeat(20);
        let record = running("t", 7, Some(&long));
        let found = Found::of(Some(record.as_lock()), Some(&record));
        assert!(fingerprint_admitted(found, Some(long.as_bytes()), 10));
        assert!(!fingerprint_admitted(found, Some(&[b'g'; 20]), 10));
        assert!(
            fingerprint_admitted(found, Some(b"short"), 10),
            "within the limit"
        );
        assert!(fingerprint_admitted(found, None, 10));
        assert!(!fingerprint_admitted(
            Found::Free,
            Some(long.as_bytes()),
            10
        ));
        assert!(fingerprint_admitted(Found::Free, Some(long.as_bytes()), 20));
    }

    #[test]
    fn a_keep_time_is_bounded_so_that_done_can_always_store_it() {
        let max = MAX_KEEP_MS.to_string();
        let beyond = (MAX_KEEP_MS + 1).to_string();
        assert_eq!(parse_keep(b"5", "lock.once", 10), Ok(5));
        let invalid = Err(CommandError::InvalidExpire("lock.once"));
        assert_eq!(parse_keep(b"11", "lock.once", 10), invalid);
        assert_eq!(parse_keep(b"0", "lock.once", 10), invalid);
        assert_eq!(
            parse_keep(beyond.as_bytes(), "lock.once", i64::MAX),
            invalid
        );
        let keep = parse_keep(max.as_bytes(), "lock.once", i64::MAX).unwrap();
        assert!(
            kept_until(MAX_KEEP_MS, keep).is_some(),
            "storable until then"
        );
        assert_eq!(
            parse_keep(b"x", "lock.record", i64::MAX),
            Err(CommandError::NotAnInteger)
        );
    }

    #[test]
    fn results_are_bounded_and_kept_until_their_keep_time() {
        assert_eq!(check_result(10, 10), Ok(()));
        assert_eq!(check_result(11, 10), Err(CommandError::ResultTooLong));
        assert_eq!(kept_until(1_000, 500), Some(1_500));
        assert_eq!(kept_until(i64::MAX, 1), None);
        assert_eq!(kept_until(0, u64::MAX), None);
    }

    #[test]
    fn fingerprints_compare_whole() {
        assert!(fingerprint_matches(Some(b"abc"), Some(b"abc")));
        assert!(!fingerprint_matches(Some(b"abc"), Some(b"ab")));
        assert!(fingerprint_matches(None, Some(b"ab")));
        assert!(fingerprint_matches(Some(b"abc"), None));
    }
}
