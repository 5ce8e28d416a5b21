//! The server's clocks: Redis's own milliseconds (the clock of key expiry) and the wall
//! clock in microseconds (the fast-moving term of the fence clock).

/// The server's wall clock in Unix milliseconds, the one Redis uses for expiry.
pub fn now_ms() -> i64 {
    // SAFETY: a plain clock read.
    unsafe { api!(RedisModule_Milliseconds)() }
}

/// The wall clock in Unix microseconds, the fast-moving term of the fence clock.
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
        })
}
