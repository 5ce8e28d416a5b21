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
    // `clock_gettime` itself (the vDSO, no system call), seconds and microseconds in
    // u64: `SystemTime::now().duration_since(UNIX_EPOCH)` and `as_micros` cost twice
    // the clock read on every grant and every holding's end.
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write; CLOCK_REALTIME always exists.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) } != 0 {
        return 0;
    }
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let micros = u64::try_from(now.tv_nsec).unwrap_or(0) / 1000;
    seconds.saturating_mul(1_000_000).saturating_add(micros)
}
