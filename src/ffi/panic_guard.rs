//! The last line of defence at every entry point Redis calls: a panic (a bug: a double
//! borrow, an arithmetic overflow) is caught here instead of unwinding into Redis,
//! which would abort the server with every lock in it. A command answers
//! `ERR internal error in fencelock (…)`, a callback logs a warning and does nothing
//! more; the server keeps running.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{logging, RedisError, RedisResult};

/// The panic's message, as far as it has one.
fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("panic")
}

/// Runs a command body; a panic becomes the command's error reply.
pub fn command(name: &str, body: impl FnOnce() -> RedisResult) -> RedisResult {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let text = message(payload.as_ref());
        logging::log_warning(format!("fencelock: internal error in {name}: {text}"));
        Err(RedisError::String(format!(
            "ERR internal error in fencelock ({text})"
        )))
    })
}

/// Runs a callback body; a panic is logged and `fallback` returned to Redis.
pub fn callback<T>(what: &str, fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let text = message(payload.as_ref());
        logging::log_warning(format!("fencelock: internal error in {what}: {text}"));
        fallback
    })
}
