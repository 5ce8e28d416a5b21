//! Tokens that commands compare with the holder's (`RELEASE`, `REFRESH`, `FENCE`, and
//! `ACQUIRE`'s same-token retry). The length limit bounds what a *new* holding may
//! store; comparing needs no limit beyond what any holding can carry.

use super::errors::CommandError;
use crate::limits;
use crate::lock::{self, Holding};
use crate::store::WrongType;
use crate::token;

/// A token a command compares with the holder's. The length limit bounds what a *new*
/// holding may store; a holder keeps working with the token it was granted under an
/// earlier, larger limit (or on a primary configured differently). A token over today's
/// limit that does not hold the lock is refused as invalid, as before.
#[derive(Clone, Copy)]
pub struct ComparedToken<'a> {
    pub bytes: &'a [u8],
    within_limit: bool,
}

/// Any token a holding can carry; whether it is within today's limit is decided later.
pub fn parse_compared_token(bytes: &[u8]) -> Result<ComparedToken<'_>, CommandError> {
    if bytes.is_empty() || bytes.len() > crate::holding::MAX_TOKEN_BYTES {
        return Err(CommandError::InvalidToken);
    }
    Ok(ComparedToken {
        bytes,
        within_limit: token::is_valid(bytes, limits::max_token_length()),
    })
}

impl ComparedToken<'_> {
    /// Longer than today's `fencelock.max-token-length`.
    pub fn over_limit(&self) -> bool {
        !self.within_limit
    }

    /// Whether this token holds the lock (`holding` as read from the key). A token over
    /// the limit that does not hold it is `InvalidToken`, whatever the key holds.
    pub fn holds(
        &self,
        holding: Result<Option<&Holding>, WrongType>,
    ) -> Result<bool, CommandError> {
        match holding {
            Ok(current) if lock::is_holder(current, self.bytes) => Ok(true),
            _ if !self.within_limit => Err(CommandError::InvalidToken),
            Ok(_) => Ok(false),
            Err(wrong_type) => Err(wrong_type.into()),
        }
    }
}
