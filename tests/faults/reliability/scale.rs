//! Short runs for CI, long ones for `make soak` (which sets `FENCELOCK_SOAK=1`).

use std::time::Duration;

/// True when the full soak scenarios were asked for.
pub fn soak() -> bool {
    std::env::var("FENCELOCK_SOAK").is_ok_and(|value| !value.is_empty() && value != "0")
}

/// `ci` normally, `soak` under `FENCELOCK_SOAK=1`.
pub fn pick<T>(ci: T, soak: T) -> T {
    if self::soak() {
        soak
    } else {
        ci
    }
}

/// A duration in seconds chosen by `pick`.
pub fn seconds(ci: u64, soak: u64) -> Duration {
    Duration::from_secs(pick(ci, soak))
}
