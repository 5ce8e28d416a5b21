//! A holding (token + fence) packed into one small allocation, the value Redis keeps
//! for every held lock. Pure: no Redis types.
//!
//! Layout: `fence: u64 LE | header: u16 LE | token bytes`. The header's low 15 bits are
//! the stored token length; its top bit marks a *compact* token: 32 lowercase hex
//! characters (every server-generated token) stored as their 16 raw bytes. A generated
//! lock thus costs 26 bytes (one 32-byte allocator slot) instead of a struct plus a
//! separate token buffer.

use std::borrow::Cow;

use crate::fence::MAX_FENCE;
use crate::token;

const FENCE_BYTES: usize = 8;
const HEADER_BYTES: usize = FENCE_BYTES + 2;
const COMPACT: u16 = 0x8000;
/// Longest token a holding can store (15 bits of length).
pub const MAX_TOKEN_BYTES: usize = 0x7fff;

/// Who holds a lock, and the fence of that grant. Always handled by reference or in a
/// `Box`; the bytes behind it are a valid packed holding.
#[repr(transparent)]
#[derive(Debug, PartialEq, Eq)]
pub struct Holding([u8]);

impl Holding {
    /// Packs `token` and `fence`. `None` if the token is longer than `MAX_TOKEN_BYTES`,
    /// or the fence is 0: no grant has fence 0, and a lock value whose first eight bytes
    /// are zero is a set of shared holders (`value`).
    pub fn pack(token: &[u8], fence: u64) -> Option<Box<Holding>> {
        if fence == 0 {
            return None;
        }
        match token::compact(token) {
            Some(raw) => Self::pack_stored(&raw, COMPACT, fence),
            None => Self::pack_stored(token, 0, fence),
        }
    }

    /// Packs a token generated for this grant: its raw bytes are stored as they are,
    /// the same holding `pack` makes of its hex spelling.
    pub fn pack_generated(token: &token::Generated, fence: u64) -> Option<Box<Holding>> {
        if fence == 0 {
            return None;
        }
        Self::pack_stored(token.raw(), COMPACT, fence)
    }

    fn pack_stored(stored: &[u8], flag: u16, fence: u64) -> Option<Box<Holding>> {
        let len = u16::try_from(stored.len())
            .ok()
            .filter(|&l| usize::from(l) <= MAX_TOKEN_BYTES)?;
        let mut bytes = Vec::with_capacity(HEADER_BYTES + stored.len());
        bytes.extend_from_slice(&fence.to_le_bytes());
        bytes.extend_from_slice(&(len | flag).to_le_bytes());
        bytes.extend_from_slice(stored);
        Some(Self::from_boxed_bytes(bytes.into_boxed_slice()))
    }

    /// A holding read back from an RDB or `RESTORE` payload, validated: `None` (corrupt
    /// data: the load fails) unless the token is non-empty and storable and the fence
    /// is one the fence clock could have issued.
    pub fn from_persisted(token: &[u8], fence: u64) -> Option<Box<Holding>> {
        if token.is_empty() || fence == 0 || fence > MAX_FENCE {
            return None;
        }
        Self::pack(token, fence)
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

    fn stored_token(&self) -> &[u8] {
        self.0.get(HEADER_BYTES..).unwrap_or(&[])
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
    pub fn stored_form(&self) -> &[u8] {
        self.0.get(FENCE_BYTES..).unwrap_or(&[])
    }

    /// The token in its canonical stored form (compact or not, and the bytes): equal for
    /// two tokens exactly when they are equal, and the same for an `Offered` token.
    pub(crate) fn token_key(&self) -> (bool, &[u8]) {
        (self.is_compact(), self.stored_token())
    }

    /// Whether two holdings carry the same token (as stored: no decoding).
    pub fn same_token(&self, other: &Holding) -> bool {
        self.header() == other.header()
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

    /// Frees a holding made by `into_raw`.
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` and is invalid afterwards.
    pub unsafe fn free_raw(ptr: *mut u8) {
        let len = Self::raw_len(ptr);
        let bytes = std::ptr::slice_from_raw_parts_mut(ptr, len);
        drop(Box::from_raw(bytes as *mut Holding));
    }

    /// Total length of the allocation at `ptr`, read from its header.
    unsafe fn raw_len(ptr: *const u8) -> usize {
        let header = u16::from_le_bytes([*ptr.add(FENCE_BYTES), *ptr.add(FENCE_BYTES + 1)]);
        HEADER_BYTES + usize::from(header & !COMPACT)
    }
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
        assert!(Holding::from_persisted(b"t", 1).is_some());
        assert!(Holding::from_persisted(b"t", MAX_FENCE).is_some());
        assert!(Holding::from_persisted(b"", 1).is_none(), "empty token");
        assert!(
            Holding::from_persisted(b"t", 0).is_none(),
            "fence 0 is never issued"
        );
        assert!(Holding::from_persisted(b"t", MAX_FENCE + 1).is_none());
        assert!(Holding::from_persisted(&vec![b'x'; MAX_TOKEN_BYTES + 1], 1).is_none());
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
        let packed = Holding::pack_generated(&generated, 42).unwrap();
        assert_eq!(
            Some(packed.as_ref()),
            Holding::pack(generated.hex(), 42).as_deref()
        );
        assert_eq!(packed.token().as_ref(), generated.hex());
        assert_eq!(
            token::compact(generated.hex()).as_ref(),
            Some(generated.raw())
        );
        assert!(Holding::pack_generated(&generated, 0).is_none());
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
