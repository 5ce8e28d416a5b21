//! The limits every command checks, as a value: the module reads them from its configs
//! (`fencelock.max-ttl`, `max-waiters`, `max-token-length`, `max-holders`) and passes them in, so the
//! parsers and decisions here are tested with any limits.

/// Default longest lease: 30 days. Longer ttls are almost always a unit mistake
/// (seconds passed as milliseconds twice over), and a lock left that long is an outage.
pub const DEFAULT_MAX_TTL_MS: i64 = 30 * 24 * 60 * 60 * 1000;
/// Default bound on the clients waiting for one key.
pub const DEFAULT_MAX_WAITERS: i64 = 100_000;
/// Default longest client-chosen token, in bytes.
pub const DEFAULT_MAX_TOKEN_LENGTH: i64 = 256;
/// Default bound on the holders of one shared lock (`LIMIT` at most this, too).
pub const DEFAULT_MAX_HOLDERS: i64 = 10_000;
/// Largest `fencelock.max-holders`.
pub const MAX_HOLDERS_LIMIT: i64 = 1_000_000;
/// Largest `fencelock.max-waiters`.
pub const MAX_WAITERS_LIMIT: i64 = 100_000_000;
/// Largest `fencelock.max-token-length`: tokens are kept in memory for every holder.
pub const MAX_TOKEN_LENGTH_LIMIT: i64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_ttl_ms: i64,
    pub max_waiters: usize,
    pub max_token_length: usize,
    pub max_holders: usize,
}

impl Limits {
    /// Limits from the configs' raw values (which the configs keep in range).
    pub fn from_configs(
        max_ttl_ms: i64,
        max_waiters: i64,
        max_token_length: i64,
        max_holders: i64,
    ) -> Self {
        Limits {
            max_ttl_ms,
            max_waiters: usize::try_from(max_waiters).unwrap_or(usize::MAX),
            max_token_length: usize::try_from(max_token_length).unwrap_or(0),
            max_holders: usize::try_from(max_holders).unwrap_or(1),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from_configs(
            DEFAULT_MAX_TTL_MS,
            DEFAULT_MAX_WAITERS,
            DEFAULT_MAX_TOKEN_LENGTH,
            DEFAULT_MAX_HOLDERS,
        )
    }
}
