//! The server's clocks: Redis's own milliseconds (the clock of key expiry), the time a
//! command judges expiry by, and the wall clock in microseconds (the fast-moving term of
//! the fence clock).

/// The server's wall clock in Unix milliseconds, the one Redis uses for expiry.
pub fn now_ms() -> i64 {
    // SAFETY: a plain clock read.
    unsafe { api!(RedisModule_Milliseconds)() }
}

/// Now, as the running command judges key expiry: Redis freezes it for the whole of a
/// transaction or script (and a command) at its start, so a lease that ends meanwhile
/// still holds until it is over, exclusive (the key's expiry) or shared (judged here)
/// alike. Servers without `RM_CachedMicroseconds` (Redis 7.0) only have the wall
/// clock. Only for commands: outside one, the cached time may be a cron tick old.
pub fn command_ms() -> i64 {
    match optional_api!(RedisModule_CachedMicroseconds) {
        // SAFETY: a plain read of the server's cached time.
        Some(cached) => (unsafe { cached() }) / 1000,
        None => now_ms(),
    }
}

/// The wall clock in Unix microseconds, the fast-moving term of the fence clock.
pub fn now_micros() -> u64 {
    // Seconds and microseconds in u64: `as_micros` divides in u128, which costs more
    // than the clock read on every grant and every holding's end.
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            elapsed
                .as_secs()
                .saturating_mul(1_000_000)
                .saturating_add(u64::from(elapsed.subsec_micros()))
        })
}
