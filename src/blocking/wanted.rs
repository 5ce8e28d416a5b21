//! What an acquire asks for besides its keys, one type from the command's parse to the
//! waiter's grant: `LOCK.ACQUIRE`, `LOCK.ACQUIREALL` and `LOCK.ONCE` build it over
//! their argv (borrowed, no copy on the path that grants at once), and a wait keeps it
//! as its own copy (`into_owned`) until it is granted, refused or ends.

use std::borrow::Cow;

use fencelock_core::holding::Extras;
use fencelock_core::mode::Mode;

use super::once_waits::OnceWanted;

/// What an acquire asks for besides its keys.
#[derive(Clone)]
pub struct Wanted<'a> {
    pub ttl_ms: i64,
    /// The token chosen with `TOKEN` (checked for length by the parse; whether one over
    /// today's limit may renew is the command's check), else a generated one.
    pub token: Option<Cow<'a, [u8]>>,
    /// `BLOCK timeout-ms`: how long it may wait (0: forever), if at all.
    pub block_ms: Option<i64>,
    pub mode: Mode,
    /// The session the holding is to belong to (`LOCK.CLOSE` answers its waits nil).
    pub session: Option<Cow<'a, [u8]>>,
    pub lock_delay_ms: u64,
    /// The holding's public value (`VALUE`; an empty one is none).
    pub value: Option<Cow<'a, [u8]>>,
    /// Asked by `LOCK.ACQUIREALL` (of one key or several): its grant is answered
    /// `[token, [fences]]`.
    pub all_keys: bool,
    /// Asked by `LOCK.ONCE`: its grant is a run, and `LOCK.DONE` answers it with the
    /// result.
    pub once: Option<OnceWanted>,
}

impl Wanted<'_> {
    /// What the holding is to carry besides its token and fence.
    pub fn extras(&self) -> Extras<'_> {
        Extras {
            session: self.session.as_deref(),
            lock_delay_ms: self.lock_delay_ms,
            value: self.value.as_deref(),
        }
    }

    /// The same request holding its own bytes, for a wait that outlives the command.
    pub fn into_owned(self) -> Wanted<'static> {
        Wanted {
            ttl_ms: self.ttl_ms,
            token: self.token.map(|token| Cow::Owned(token.into_owned())),
            block_ms: self.block_ms,
            mode: self.mode,
            session: self.session.map(|session| Cow::Owned(session.into_owned())),
            lock_delay_ms: self.lock_delay_ms,
            value: self.value.map(|value| Cow::Owned(value.into_owned())),
            all_keys: self.all_keys,
            once: self.once,
        }
    }
}
