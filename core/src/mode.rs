//! How a lock is held: by one exclusive holder, by shared holders (a read-write lock's
//! readers), or by at most `n` shared holders (a semaphore). A request asks for one of
//! these; a held lock *is* one of these, and the limit belongs to the lock while it has
//! holders.

use std::fmt;

/// A mode asked for by `LOCK.ACQUIRE`, or the mode a held lock is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One holder at a time (no `SHARED`, no `LIMIT`).
    Exclusive,
    /// Any number of shared holders, up to `fencelock.max-holders` (`SHARED`).
    Shared,
    /// At most this many shared holders (`LIMIT n`).
    Semaphore(u32),
}

impl Mode {
    /// Whether holders in this mode may hold together.
    pub fn is_shared(self) -> bool {
        !matches!(self, Mode::Exclusive)
    }

    /// The limit a set of shared holders stores: 0 for plain `SHARED`.
    pub fn stored_limit(self) -> u32 {
        match self {
            Mode::Semaphore(limit) => limit,
            _ => 0,
        }
    }

    /// The shared mode of a stored limit (0: plain `SHARED`).
    pub fn from_stored_limit(limit: u32) -> Mode {
        if limit == 0 {
            Mode::Shared
        } else {
            Mode::Semaphore(limit)
        }
    }

    /// The name `LOCK.INFO` reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
            Mode::Semaphore(_) => "semaphore",
        }
    }
}

/// What a held lock is, as the `WRONGMODE` reply says it after the key's name.
impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Exclusive => f.write_str("is held exclusively"),
            Mode::Shared => f.write_str("is held shared"),
            Mode::Semaphore(limit) => write!(f, "is a semaphore with limit {limit}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_modes_describe_themselves_as_wrongmode_says_it() {
        assert_eq!(Mode::Exclusive.to_string(), "is held exclusively");
        assert_eq!(Mode::Shared.to_string(), "is held shared");
        assert_eq!(
            Mode::Semaphore(5).to_string(),
            "is a semaphore with limit 5"
        );
    }

    #[test]
    fn stored_limits_round_trip() {
        for mode in [Mode::Shared, Mode::Semaphore(1), Mode::Semaphore(10_000)] {
            assert_eq!(Mode::from_stored_limit(mode.stored_limit()), mode);
        }
    }
}
