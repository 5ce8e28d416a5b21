//! A holding (token + fence, and optionally its session, lock-delay and public value)
//! packed into one small allocation, the value Redis keeps for every held lock. Pure: no
//! Redis types.
//!
//! Layout: `fence: u64 LE | header: u16 LE | token bytes | [lock-delay: u64 LE, lease
//! end: i64 LE] | [session header: u16 LE | session bytes] | [value length: u32 LE |
//! value bytes]`. The header's low 12 bits are the stored token length less one (no
//! token is empty, so 1 to 4096 bytes fit); its top bit marks a *compact* token: 32
//! lowercase hex characters (every server-generated token) stored as their 16 raw bytes.
//! Bit 14 says a session follows, bit 13 a lock-delay (with it, an exclusive holding's
//! lease end, Unix ms: its key lasts the delay longer, so the key's expiry cannot say
//! when the lease ends, and a hand-set `PEXPIRE` must not bring an ended lease back),
//! bit 12 a value (what `LOCK.PROCLAIM` sets and `LOCK.OBSERVE` shows, e.g. a leader's
//! address); a holding without any of them is exactly what it was before sessions (a
//! generated lock costs 26 bytes, one 32-byte allocator slot). The session header is
//! the token's again (compact bit, length), so a 32-hex session costs 18 bytes.

use std::borrow::Cow;

use crate::fence_clock::MAX_FENCE;
use crate::token;

const FENCE_BYTES: usize = 8;
const HEADER_BYTES: usize = FENCE_BYTES + 2;
const COMPACT: u16 = 0x8000;
const HAS_SESSION: u16 = 0x4000;
const HAS_LOCK_DELAY: u16 = 0x2000;
const HAS_VALUE: u16 = 0x1000;
/// The stored length less one.
const LENGTH_BITS: u16 = 0x0fff;
/// The lock-delay and the lease end.
const DELAY_BYTES: usize = 16;
const DELAY_VALUE_BYTES: usize = 8;
const SESSION_HEADER_BYTES: usize = 2;
const VALUE_HEADER_BYTES: usize = 4;
/// Longest token (or session) a holding can store (12 bits of length less one): the
/// largest `fencelock.max-token-length`.
pub const MAX_TOKEN_BYTES: usize = LENGTH_BITS as usize + 1;
/// Longest value a holding can store (`fencelock.max-value-length` is at most this).
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// Who holds a lock, and the fence of that grant. Always handled by reference or in a
/// `Box`; the bytes behind it are a valid packed holding.
#[repr(transparent)]
#[derive(Debug, PartialEq, Eq)]
pub struct Holding([u8]);

/// What a holding carries besides its token and fence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extras<'a> {
    /// The session the holding belongs to.
    pub session: Option<&'a [u8]>,
    /// How long the key stays taken by nobody once this lease runs out (0: not at all).
    pub lock_delay_ms: u64,
    /// The holding's public value (`None`, or empty: none).
    pub value: Option<&'a [u8]>,
}

impl Holding {
    /// Packs `token` and `fence`. `None` if the token is longer than `MAX_TOKEN_BYTES`,
    /// or the fence is 0: no grant has fence 0, and a lock value whose first eight bytes
    /// are zero is a set of shared holders (`value`).
    pub fn pack(token: &[u8], fence: u64) -> Option<Box<Holding>> {
        Self::pack_with(token, fence, Extras::default())
    }

    /// As `pack`, with a session and a lock-delay (`None` also for a session that is
    /// empty or longer than `MAX_TOKEN_BYTES`).
    pub fn pack_with(token: &[u8], fence: u64, extras: Extras) -> Option<Box<Holding>> {
        match token::compact(token) {
            Some(raw) => Self::pack_stored(&raw, COMPACT, fence, extras),
            None => Self::pack_stored(token, 0, fence, extras),
        }
    }

    /// Packs a token generated for this grant: its raw bytes are stored as they are,
    /// the same holding `pack_with` makes of its hex spelling.
    pub fn pack_generated(
        token: &token::Generated,
        fence: u64,
        extras: Extras,
    ) -> Option<Box<Holding>> {
        Self::pack_stored(token.raw(), COMPACT, fence, extras)
    }

    fn pack_stored(stored: &[u8], flag: u16, fence: u64, extras: Extras) -> Option<Box<Holding>> {
        if fence == 0 {
            return None;
        }
        let len = stored_length(stored)?;
        let session = match extras.session {
            Some([]) => return None,
            Some(session) => Some(match token::compact(session) {
                Some(raw) => (Cow::Owned(raw.to_vec()), COMPACT),
                None => (Cow::Borrowed(session), 0),
            }),
            None => None,
        };
        let mut header = len | flag;
        let mut capacity = HEADER_BYTES + stored.len();
        if extras.lock_delay_ms > 0 {
            header |= HAS_LOCK_DELAY;
            capacity += DELAY_BYTES;
        }
        if let Some((bytes, _)) = &session {
            header |= HAS_SESSION;
            capacity += SESSION_HEADER_BYTES + bytes.len();
        }
        let value = stored_value(extras.value)?;
        if let Some(value) = value {
            header |= HAS_VALUE;
            capacity += VALUE_HEADER_BYTES + value.len();
        }
        let mut bytes = Vec::with_capacity(capacity);
        bytes.extend_from_slice(&fence.to_le_bytes());
        bytes.extend_from_slice(&header.to_le_bytes());
        bytes.extend_from_slice(stored);
        if extras.lock_delay_ms > 0 {
            bytes.extend_from_slice(&extras.lock_delay_ms.to_le_bytes());
            // Until set (`set_lease_end`): a lease that never ends before its key.
            bytes.extend_from_slice(&i64::MAX.to_le_bytes());
        }
        if let Some((session, session_flag)) = session {
            let session_len = stored_length(&session)?;
            bytes.extend_from_slice(&(session_len | session_flag).to_le_bytes());
            bytes.extend_from_slice(&session);
        }
        if let Some(value) = value {
            push_value(&mut bytes, value);
        }
        Some(Self::from_boxed_bytes(bytes.into_boxed_slice()))
    }

    /// This holding with `value` as its public value instead (`None` or empty: none),
    /// everything else byte for byte as it is. `None` if the value is too long.
    pub fn with_value(&self, value: Option<&[u8]>) -> Option<Box<Holding>> {
        let value = stored_value(value)?;
        let kept = self.value_start();
        let mut bytes =
            Vec::with_capacity(kept + value.map_or(0, |v| VALUE_HEADER_BYTES + v.len()));
        bytes.extend_from_slice(self.0.get(..kept)?);
        let header = match value {
            Some(_) => self.header() | HAS_VALUE,
            None => self.header() & !HAS_VALUE,
        };
        bytes
            .get_mut(FENCE_BYTES..HEADER_BYTES)?
            .copy_from_slice(&header.to_le_bytes());
        if let Some(value) = value {
            push_value(&mut bytes, value);
        }
        Some(Self::from_boxed_bytes(bytes.into_boxed_slice()))
    }

    /// A holding read back from an RDB or `RESTORE` payload, validated: `None` (corrupt
    /// data: the load fails) unless the token (and session, if any) is non-empty and
    /// storable and the fence is one the fence clock could have issued.
    pub fn from_persisted(token: &[u8], fence: u64, extras: Extras) -> Option<Box<Holding>> {
        if token.is_empty() || fence == 0 || fence > MAX_FENCE {
            return None;
        }
        Self::pack_with(token, fence, extras)
    }

    fn from_boxed_bytes(bytes: Box<[u8]>) -> Box<Holding> {
        // SAFETY: `Holding` is `repr(transparent)` over `[u8]`, so the fat pointer's
        // layout and metadata are the same.
        unsafe { Box::from_raw(Box::into_raw(bytes) as *mut Holding) }
    }

    fn header(&self) -> u16 {
        match self.0.get(FENCE_BYTES..HEADER_BYTES) {
            Some(&[low, high]) => u16::from_le_bytes([low, high]),
            _ => 0,
        }
    }

    fn token_len(&self) -> usize {
        usize::from(self.header() & LENGTH_BITS) + 1
    }

    fn stored_token(&self) -> &[u8] {
        self.0
            .get(HEADER_BYTES..HEADER_BYTES + self.token_len())
            .unwrap_or(&[])
    }

    /// Where the optional parts start: the lock-delay, then the session.
    fn extras_start(&self) -> usize {
        HEADER_BYTES + self.token_len()
    }

    fn session_start(&self) -> usize {
        let delay = if self.header() & HAS_LOCK_DELAY != 0 {
            DELAY_BYTES
        } else {
            0
        };
        self.extras_start() + delay
    }

    /// The session's header and stored bytes, if the holding has a session.
    fn stored_session(&self) -> Option<(u16, &[u8])> {
        if self.header() & HAS_SESSION == 0 {
            return None;
        }
        let start = self.session_start();
        let header = match self.0.get(start..start + SESSION_HEADER_BYTES) {
            Some(&[low, high]) => u16::from_le_bytes([low, high]),
            _ => return None,
        };
        let bytes_start = start + SESSION_HEADER_BYTES;
        let bytes = self
            .0
            .get(bytes_start..bytes_start + usize::from(header & LENGTH_BITS) + 1)?;
        Some((header, bytes))
    }

    /// Where the value (if any) starts: after the session.
    fn value_start(&self) -> usize {
        match self.stored_session() {
            Some((_, session)) => self.session_start() + SESSION_HEADER_BYTES + session.len(),
            None => self.session_start(),
        }
    }

    /// The holding's public value, if it has one.
    pub fn value(&self) -> Option<&[u8]> {
        if self.header() & HAS_VALUE == 0 {
            return None;
        }
        let start = self.value_start();
        let length = match self.0.get(start..start + VALUE_HEADER_BYTES) {
            Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
            _ => return None,
        };
        let bytes_start = start + VALUE_HEADER_BYTES;
        self.0
            .get(bytes_start..bytes_start + usize::try_from(length).ok()?)
    }

    /// The session this holding belongs to, as clients name it.
    pub fn session(&self) -> Option<Cow<'_, [u8]>> {
        self.stored_session().map(|(header, bytes)| {
            if header & COMPACT != 0 {
                Cow::Owned(token::to_hex(bytes))
            } else {
                Cow::Borrowed(bytes)
            }
        })
    }

    /// Whether the holding belongs to `session` (`None`: to no session). Compared in
    /// constant time, as a session name is as secret as a token.
    pub fn in_session(&self, session: Option<&[u8]>) -> bool {
        match (self.stored_session(), session) {
            (None, None) => true,
            (Some((header, stored)), Some(offered)) => {
                if header & COMPACT != 0 {
                    token::compact(offered).is_some_and(|raw| token::tokens_match(stored, &raw))
                } else {
                    token::tokens_match(stored, offered)
                }
            }
            _ => false,
        }
    }

    /// Whether the holding belongs to any session.
    pub fn has_session(&self) -> bool {
        self.header() & HAS_SESSION != 0
    }

    /// How long the key stays taken by nobody after this lease runs out.
    pub fn lock_delay_ms(&self) -> u64 {
        if self.header() & HAS_LOCK_DELAY == 0 {
            return 0;
        }
        let start = self.extras_start();
        let mut delay = [0u8; DELAY_VALUE_BYTES];
        if let Some(bytes) = self.0.get(start..start + DELAY_VALUE_BYTES) {
            delay.copy_from_slice(bytes);
        }
        u64::from_le_bytes(delay)
    }

    /// When an exclusive holding with a lock-delay stops holding (Unix ms); `None`
    /// without a lock-delay (its key's expiry says it).
    pub fn lease_end_ms(&self) -> Option<i64> {
        if self.header() & HAS_LOCK_DELAY == 0 {
            return None;
        }
        let start = self.extras_start() + DELAY_VALUE_BYTES;
        let mut end = [0u8; 8];
        end.copy_from_slice(self.0.get(start..start + 8)?);
        Some(i64::from_le_bytes(end))
    }

    /// Sets the lease end of a holding with a lock-delay (nothing without one).
    pub fn set_lease_end(&mut self, end_ms: i64) {
        if self.header() & HAS_LOCK_DELAY == 0 {
            return;
        }
        let start = self.extras_start() + DELAY_VALUE_BYTES;
        if let Some(bytes) = self.0.get_mut(start..start + 8) {
            bytes.copy_from_slice(&end_ms.to_le_bytes());
        }
    }

    /// What the holding carries besides token and fence, borrowed.
    pub fn extras(&self) -> (Option<Cow<'_, [u8]>>, u64) {
        (self.session(), self.lock_delay_ms())
    }

    fn is_compact(&self) -> bool {
        self.header() & COMPACT != 0
    }

    pub fn fence(&self) -> u64 {
        let mut fence = [0u8; FENCE_BYTES];
        if let Some(bytes) = self.0.get(..FENCE_BYTES) {
            fence.copy_from_slice(bytes);
        }
        u64::from_le_bytes(fence)
    }

    /// The token as clients know it.
    pub fn token(&self) -> Cow<'_, [u8]> {
        if self.is_compact() {
            Cow::Owned(token::to_hex(self.stored_token()))
        } else {
            Cow::Borrowed(self.stored_token())
        }
    }

    /// Constant-time comparison against a token offered by a client.
    pub fn is_token(&self, offered: &[u8]) -> bool {
        self.is_offered(&Offered::new(offered))
    }

    /// As `is_token`, for a token decoded once to be compared with many holdings.
    pub fn is_offered(&self, offered: &Offered) -> bool {
        if self.is_compact() {
            offered
                .compact
                .is_some_and(|raw| token::tokens_match(self.stored_token(), &raw))
        } else {
            token::tokens_match(self.stored_token(), offered.raw)
        }
    }

    /// The token as stored, with its header: equal for two holdings exactly when their
    /// tokens are equal (an order to sort holdings by token, without decoding).
    pub fn stored_form(&self) -> (u16, &[u8]) {
        (self.header() & (COMPACT | LENGTH_BITS), self.stored_token())
    }

    /// The token in its canonical stored form (compact or not, and the bytes): equal for
    /// two tokens exactly when they are equal, and the same for an `Offered` token.
    pub(crate) fn token_key(&self) -> (bool, &[u8]) {
        (self.is_compact(), self.stored_token())
    }

    /// Whether two holdings carry the same token (as stored: no decoding).
    pub fn same_token(&self, other: &Holding) -> bool {
        self.stored_form().0 == other.stored_form().0
            && token::tokens_match(self.stored_token(), other.stored_token())
    }

    /// Bytes of the packed allocation (for `MEMORY USAGE`).
    pub fn allocated_bytes(&self) -> usize {
        self.0.len()
    }

    /// Hands the allocation over as a thin pointer (what Redis stores for a key).
    pub fn into_raw(holding: Box<Holding>) -> *mut u8 {
        Box::into_raw(holding).cast::<u8>()
    }

    /// Borrows the holding behind a pointer made by `into_raw`.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` and not have been freed.
    pub unsafe fn from_raw<'a>(ptr: *const u8) -> &'a Holding {
        let len = Self::raw_len(ptr);
        let bytes = std::slice::from_raw_parts(ptr, len);
        &*(bytes as *const [u8] as *const Holding)
    }

    /// Borrows the holding behind a pointer made by `into_raw`, to change it in place.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw`, not have been freed, and not be borrowed
    /// elsewhere while the returned reference lives.
    pub unsafe fn from_raw_mut<'a>(ptr: *mut u8) -> &'a mut Holding {
        let len = Self::raw_len(ptr);
        let bytes = std::slice::from_raw_parts_mut(ptr, len);
        &mut *(bytes as *mut [u8] as *mut Holding)
    }

    /// Frees a holding made by `into_raw`.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` and is invalid afterwards.
    pub unsafe fn free_raw(ptr: *mut u8) {
        let len = Self::raw_len(ptr);
        let bytes = std::ptr::slice_from_raw_parts_mut(ptr, len);
        drop(Box::from_raw(bytes as *mut Holding));
    }

    /// Total length of the allocation at `ptr`, read from its headers.
    unsafe fn raw_len(ptr: *const u8) -> usize {
        // SAFETY: the caller's contract: a packed holding, whose headers say its length.
        unsafe {
            let header = u16::from_le_bytes([*ptr.add(FENCE_BYTES), *ptr.add(FENCE_BYTES + 1)]);
            let mut len = HEADER_BYTES + usize::from(header & LENGTH_BITS) + 1;
            if header & HAS_LOCK_DELAY != 0 {
                len += DELAY_BYTES;
            }
            if header & HAS_SESSION != 0 {
                let session = u16::from_le_bytes([*ptr.add(len), *ptr.add(len + 1)]);
                len += SESSION_HEADER_BYTES + usize::from(session & LENGTH_BITS) + 1;
            }
            if header & HAS_VALUE != 0 {
                let mut value = [0u8; VALUE_HEADER_BYTES];
                std::ptr::copy_nonoverlapping(ptr.add(len), value.as_mut_ptr(), VALUE_HEADER_BYTES);
                len += VALUE_HEADER_BYTES + u32::from_le_bytes(value) as usize;
            }
            len
        }
    }
}

/// A stored token or session's length as its header spells it (less one), if it is
/// not empty and fits.
fn stored_length(stored: &[u8]) -> Option<u16> {
    u16::try_from(stored.len().checked_sub(1)?)
        .ok()
        .filter(|&len| len <= LENGTH_BITS)
}

/// The value a holding stores: `Some(None)` for none (absent or empty), `None` when it
/// is too long to store.
fn stored_value(value: Option<&[u8]>) -> Option<Option<&[u8]>> {
    match value {
        None | Some([]) => Some(None),
        Some(value) if value.len() <= MAX_VALUE_BYTES => Some(Some(value)),
        Some(_) => None,
    }
}

fn push_value(bytes: &mut Vec<u8>, value: &[u8]) {
    // At most `MAX_VALUE_BYTES` (checked by `stored_value`), so it fits a u32.
    let length = u32::try_from(value.len()).unwrap_or(u32::MAX);
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(value);
}

/// A token offered by a client, with its compact form worked out once: a command
/// that looks for it among many shared holders compares bytes, not hex, per holder.
#[derive(Clone, Copy, Debug)]
pub struct Offered<'a> {
    raw: &'a [u8],
    compact: Option<[u8; token::GENERATED_TOKEN_BYTES]>,
}

impl<'a> Offered<'a> {
    pub fn new(raw: &'a [u8]) -> Self {
        Offered {
            raw,
            compact: token::compact(raw),
        }
    }

    /// As `Holding::token_key`: the form the token would be stored in.
    pub(crate) fn token_key(&self) -> (bool, &[u8]) {
        match &self.compact {
            Some(raw) => (true, raw),
            None => (false, self.raw),
        }
    }
}

/// A holding owned through a thin pointer (8 bytes instead of a `Box`'s 16): what a
/// set of shared holders keeps per holder, where every byte counts per holder.
#[derive(Debug)]
pub struct OwnedHolding(std::ptr::NonNull<u8>);

// SAFETY: an `OwnedHolding` owns its allocation exclusively, like a `Box`.
unsafe impl Send for OwnedHolding {}

impl OwnedHolding {
    pub fn new(holding: Box<Holding>) -> Self {
        let ptr = Holding::into_raw(holding);
        // SAFETY: `into_raw` never returns null (it comes from a `Box`).
        Self(unsafe { std::ptr::NonNull::new_unchecked(ptr) })
    }
}

impl std::ops::Deref for OwnedHolding {
    type Target = Holding;

    fn deref(&self) -> &Holding {
        // SAFETY: the pointer came from `into_raw` and is freed only on drop.
        unsafe { Holding::from_raw(self.0.as_ptr()) }
    }
}

impl Drop for OwnedHolding {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `into_raw` and is freed exactly once, here.
        unsafe { Holding::free_raw(self.0.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persisted_payloads_are_validated() {
        assert!(Holding::from_persisted(b"t", 1, Extras::default()).is_some());
        assert!(Holding::from_persisted(b"t", MAX_FENCE, Extras::default()).is_some());
        assert!(
            Holding::from_persisted(b"", 1, Extras::default()).is_none(),
            "empty token"
        );
        assert!(
            Holding::from_persisted(b"t", 0, Extras::default()).is_none(),
            "fence 0 is never issued"
        );
        assert!(Holding::from_persisted(b"t", MAX_FENCE + 1, Extras::default()).is_none());
        assert!(
            Holding::from_persisted(&vec![b'x'; MAX_TOKEN_BYTES + 1], 1, Extras::default())
                .is_none()
        );
    }

    #[test]
    fn generated_tokens_are_stored_compactly_and_round_trip() {
        let token = token::generate();
        let holding = Holding::pack(&token, 42).unwrap();
        assert_eq!(holding.allocated_bytes(), 26);
        assert_eq!(holding.fence(), 42);
        assert_eq!(holding.token().as_ref(), token.as_slice());
        assert!(holding.is_token(&token));
    }

    #[test]
    fn a_generated_token_packs_as_its_hex_spelling_does() {
        let generated = token::Generated::fresh();
        let packed = Holding::pack_generated(&generated, 42, Extras::default()).unwrap();
        assert_eq!(
            Some(packed.as_ref()),
            Holding::pack(generated.hex(), 42).as_deref()
        );
        assert_eq!(packed.token().as_ref(), generated.hex());
        assert_eq!(
            token::compact(generated.hex()).as_ref(),
            Some(generated.raw())
        );
        assert!(Holding::pack_generated(&generated, 0, Extras::default()).is_none());
    }

    #[test]
    fn other_tokens_are_stored_verbatim() {
        for token in [
            &b"worker-1"[..],
            b"\x00\xff",
            b"0123456789ABCDEF0123456789abcdef",
            &[b'x'; 300],
        ] {
            let holding = Holding::pack(token, u64::MAX).unwrap();
            assert_eq!(holding.token().as_ref(), token);
            assert_eq!(holding.fence(), u64::MAX);
            assert!(holding.is_token(token));
        }
    }

    #[test]
    fn compact_tokens_only_match_their_exact_hex_spelling() {
        let token = b"0123456789abcdef0123456789abcdef";
        let holding = Holding::pack(token, 1).unwrap();
        assert!(holding.is_token(token));
        assert!(!holding.is_token(b"0123456789ABCDEF0123456789ABCDEF"));
        assert!(!holding.is_token(b"0123456789abcdef0123456789abcde"));
        assert!(!holding.is_token(b"0123456789abcdef0123456789abcdeg"));
    }

    #[test]
    fn raw_round_trip_reads_back_and_frees() {
        let holding = Holding::pack(b"abc", 7).unwrap();
        let ptr = Holding::into_raw(holding);
        // SAFETY: `ptr` comes from `into_raw` and is freed exactly once below.
        unsafe {
            let view = Holding::from_raw(ptr);
            assert_eq!(view.fence(), 7);
            assert_eq!(view.token().as_ref(), b"abc");
            Holding::free_raw(ptr);
        }
    }

    #[test]
    fn sessions_and_lock_delays_ride_along_and_read_back() {
        let session = token::generate();
        let extras = Extras {
            session: Some(&session),
            lock_delay_ms: 5_000,
            value: None,
        };
        let generated = token::Generated::fresh();
        let holding = Holding::pack_generated(&generated, 9, extras).unwrap();
        assert_eq!(holding.allocated_bytes(), 26 + 16 + 18, "compact session");
        assert_eq!(holding.token().as_ref(), generated.hex());
        assert_eq!(holding.fence(), 9);
        assert_eq!(holding.session().as_deref(), Some(session.as_slice()));
        assert_eq!(holding.lock_delay_ms(), 5_000);
        let mut holding = holding;
        assert_eq!(holding.lease_end_ms(), Some(i64::MAX));
        holding.set_lease_end(1_234);
        assert_eq!(holding.lease_end_ms(), Some(1_234));
        assert_eq!(holding.session().as_deref(), Some(session.as_slice()));
        assert!(holding.in_session(Some(&session)));
        assert!(!holding.in_session(None));
        assert!(!holding.in_session(Some(b"other")));
        let named = Holding::pack_with(
            b"t",
            3,
            Extras {
                session: Some(b"worker-7"),
                lock_delay_ms: 0,
                value: None,
            },
        )
        .unwrap();
        assert_eq!(named.session().as_deref(), Some(&b"worker-7"[..]));
        assert_eq!(named.lock_delay_ms(), 0);
        assert_eq!(named.lease_end_ms(), None);
        assert!(named.in_session(Some(b"worker-7")));
        assert!(!named.in_session(Some(b"worker-70")));
        let plain = Holding::pack(b"t", 3).unwrap();
        assert!(!plain.has_session() && plain.in_session(None));
        assert!(plain.same_token(&named), "the token alone decides");
        let ptr = Holding::into_raw(named);
        // SAFETY: `ptr` comes from `into_raw` and is freed exactly once below.
        unsafe {
            let view = Holding::from_raw(ptr);
            assert_eq!(view.allocated_bytes(), 10 + 1 + 2 + 8);
            assert_eq!(view.session().as_deref(), Some(&b"worker-7"[..]));
            Holding::free_raw(ptr);
        }
    }

    #[test]
    fn values_ride_along_change_and_leave_the_rest_as_it_was() {
        let session = token::generate();
        let extras = Extras {
            session: Some(&session),
            lock_delay_ms: 700,
            value: Some(b"10.0.0.7:8080"),
        };
        let mut holding = Holding::pack(b"candidate-1", 12).unwrap();
        assert_eq!(holding.value(), None);
        holding = holding.with_value(Some(b"host-a")).unwrap();
        assert_eq!(holding.value(), Some(&b"host-a"[..]));
        assert_eq!(holding.token().as_ref(), b"candidate-1");
        assert_eq!(holding.fence(), 12);
        let full = Holding::pack_with(b"t", 5, extras).unwrap();
        let mut full = full;
        full.set_lease_end(99);
        assert_eq!(full.value(), Some(&b"10.0.0.7:8080"[..]));
        let changed = full.with_value(Some(b"10.0.0.8:8080")).unwrap();
        assert_eq!(changed.value(), Some(&b"10.0.0.8:8080"[..]));
        assert_eq!(changed.session().as_deref(), Some(session.as_slice()));
        assert_eq!(changed.lock_delay_ms(), 700);
        assert_eq!(changed.lease_end_ms(), Some(99));
        let cleared = changed.with_value(Some(b"")).unwrap();
        assert_eq!(cleared.value(), None);
        assert_eq!(
            cleared.allocated_bytes(),
            Holding::pack_with(
                b"t",
                5,
                Extras {
                    value: None,
                    ..extras
                }
            )
            .unwrap()
            .allocated_bytes(),
            "no value costs nothing"
        );
        let ptr = Holding::into_raw(changed);
        // SAFETY: `ptr` comes from `into_raw` and is freed exactly once below.
        unsafe {
            let view = Holding::from_raw(ptr);
            assert_eq!(view.value(), Some(&b"10.0.0.8:8080"[..]));
            assert_eq!(view.allocated_bytes(), 10 + 1 + 16 + 18 + 4 + 13);
            Holding::free_raw(ptr);
        }
        let longest = vec![b'v'; MAX_VALUE_BYTES];
        assert!(holding.with_value(Some(&longest)).is_some());
        assert!(holding
            .with_value(Some(&[b'v'; MAX_VALUE_BYTES + 1]))
            .is_none());
    }

    #[test]
    fn tokens_of_every_storable_length_read_back() {
        for len in [1, 2, 4095, MAX_TOKEN_BYTES] {
            let token = vec![b'k'; len];
            let holding = Holding::pack_with(
                &token,
                3,
                Extras {
                    session: Some(&token),
                    lock_delay_ms: 0,
                    value: Some(b"v"),
                },
            )
            .unwrap();
            assert_eq!(holding.token().as_ref(), token.as_slice());
            assert_eq!(holding.session().as_deref(), Some(token.as_slice()));
            assert_eq!(holding.value(), Some(&b"v"[..]));
        }
    }

    #[test]
    fn an_empty_session_is_refused() {
        let empty = Extras {
            session: Some(b""),
            lock_delay_ms: 0,
            value: None,
        };
        assert!(Holding::pack_with(b"t", 1, empty).is_none());
    }

    #[test]
    fn fence_zero_is_never_packed() {
        assert!(Holding::pack(b"t", 0).is_none());
    }

    #[test]
    fn owned_holdings_are_thin_and_read_back() {
        assert_eq!(std::mem::size_of::<OwnedHolding>(), 8);
        let owned = OwnedHolding::new(Holding::pack(b"reader", 9).unwrap());
        assert_eq!(owned.fence(), 9);
        assert!(owned.is_token(b"reader"));
    }

    #[test]
    fn oversized_tokens_are_refused() {
        assert!(Holding::pack(&vec![b'x'; MAX_TOKEN_BYTES + 1], 1).is_none());
        assert!(Holding::pack(&vec![b'x'; MAX_TOKEN_BYTES], 1).is_some());
    }
}
