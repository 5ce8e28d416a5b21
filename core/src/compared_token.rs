//! Tokens that commands compare with the holder's (`RELEASE`, `REFRESH`, `FENCE`, and
//! `ACQUIRE`'s same-token retry). The length limit bounds what a *new* holding may
//! store; comparing needs no limit beyond what any holding can carry.

use crate::error::CommandError;
use crate::holding::MAX_TOKEN_BYTES;
use crate::lock::{self, LockRef};
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
pub fn parse_compared_token(
    bytes: &[u8],
    max_token_length: usize,
) -> Result<ComparedToken<'_>, CommandError> {
    if bytes.is_empty() || bytes.len() > MAX_TOKEN_BYTES {
        return Err(CommandError::InvalidToken);
    }
    Ok(ComparedToken {
        bytes,
        within_limit: token::is_valid(bytes, max_token_length),
    })
}

impl ComparedToken<'_> {
    /// Longer than today's `fencelock.max-token-length`.
    pub fn over_limit(&self) -> bool {
        !self.within_limit
    }

    /// Whether this token is a live holder of the lock (`current` as read from the key,
    /// at `now_ms`). A token over the limit that does not hold it is `InvalidToken`,
    /// whatever the key holds.
    pub fn holds(
        &self,
        current: Result<Option<LockRef>, CommandError>,
        now_ms: i64,
    ) -> Result<bool, CommandError> {
        match current {
            Ok(current) if lock::is_holder(current, self.bytes, now_ms) => Ok(true),
            _ if !self.within_limit => Err(CommandError::InvalidToken),
            Ok(_) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holding::Holding;

    fn held(holding: &Holding) -> Result<Option<LockRef<'_>>, CommandError> {
        Ok(Some(LockRef::Exclusive(holding)))
    }

    #[test]
    fn a_holder_keeps_a_token_over_a_lowered_limit() {
        let long = [b't'; 300];
        let holding = Holding::pack(&long, 7).unwrap();
        let token = parse_compared_token(&long, 256).unwrap();
        assert!(token.over_limit());
        assert_eq!(token.holds(held(&holding), 0), Ok(true));
        let other = Holding::pack(b"other", 8).unwrap();
        assert_eq!(
            token.holds(held(&other), 0),
            Err(CommandError::InvalidToken)
        );
        assert_eq!(token.holds(Ok(None), 0), Err(CommandError::InvalidToken));
        assert_eq!(
            token.holds(Err(CommandError::WrongType), 0),
            Err(CommandError::InvalidToken),
            "a token no holder could have is refused before the key's type"
        );
    }

    #[test]
    fn tokens_within_the_limit_compare_as_usual() {
        let holding = Holding::pack(b"mine", 7).unwrap();
        let token = parse_compared_token(b"mine", 256).unwrap();
        assert_eq!(token.holds(held(&holding), 0), Ok(true));
        let token = parse_compared_token(b"yours", 256).unwrap();
        assert_eq!(token.holds(held(&holding), 0), Ok(false));
        assert_eq!(
            token.holds(Err(CommandError::WrongType), 0),
            Err(CommandError::WrongType)
        );
        assert_eq!(
            parse_compared_token(b"", 256).err(),
            Some(CommandError::InvalidToken)
        );
    }
}
