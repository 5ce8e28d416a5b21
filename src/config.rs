//! Module configuration (`CONFIG GET/SET fencelock.*`, `loadmodule … name value`,
//! `MODULE LOADEX … CONFIG`): where each value lives, and the limits every command
//! reads from them. The table of configs is in `lib.rs`.
//!
//! Every way of setting a value is bounds-checked: `CONFIG SET` and `MODULE LOADEX`
//! by Redis against the registered range, `loadmodule` arguments here (Redis takes
//! them as defaults, which it does not check). A bad value refuses the load.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use fencelock_core::args::parse_integer;
use fencelock_core::limits::{
    Limits, DEFAULT_MAX_HOLDERS, DEFAULT_MAX_TOKEN_LENGTH, DEFAULT_MAX_TTL_MS, DEFAULT_MAX_WAITERS,
};
use redis_module::{Context, RedisString};

use crate::ffi;

pub static MAX_TTL_MS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TTL_MS);
pub static MAX_WAITERS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_WAITERS);
pub static MAX_TOKEN_LENGTH: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TOKEN_LENGTH);
pub static MAX_HOLDERS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_HOLDERS);
/// `fencelock.lock-delay`: the lock-delay of a holding acquired without `LOCKDELAY`.
pub static LOCK_DELAY_MS: AtomicI64 = AtomicI64::new(0);
/// `fencelock.max-keys`: the most keys one `LOCK.ACQUIREALL` may ask for.
pub static MAX_KEYS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_KEYS);
/// Default `fencelock.max-keys`.
pub const DEFAULT_MAX_KEYS: i64 = 64;
/// Largest `fencelock.max-keys`: every key of one call is opened at once.
pub const MAX_KEYS_LIMIT: i64 = 1024;
/// `fencelock.max-value-length`: the longest public value of a holding.
pub static MAX_VALUE_LENGTH: AtomicI64 = AtomicI64::new(DEFAULT_MAX_VALUE_LENGTH);
/// Default `fencelock.max-value-length`: room for an address or a small JSON document.
pub const DEFAULT_MAX_VALUE_LENGTH: i64 = 1024;
/// Largest `fencelock.max-value-length`: what a holding can store.
pub const MAX_VALUE_LENGTH_LIMIT: i64 = fencelock_core::holding::MAX_VALUE_BYTES as i64;
/// `fencelock.max-result-length`: the longest result `LOCK.DONE` stores.
pub static MAX_RESULT_LENGTH: AtomicI64 = AtomicI64::new(DEFAULT_MAX_RESULT_LENGTH);
/// Default `fencelock.max-result-length`: an HTTP response body of a typical API call.
pub const DEFAULT_MAX_RESULT_LENGTH: i64 = 64 * 1024;
/// Largest `fencelock.max-result-length`: results live in memory until their keep
/// time ends, on every replica too.
pub const MAX_RESULT_LENGTH_LIMIT: i64 = 16 * 1024 * 1024;
/// `fencelock.deadlock-detection`: whether a wait that would close a cycle is refused.
pub static DEADLOCK_DETECTION: AtomicBool = AtomicBool::new(true);

/// `fencelock.max-keys` now.
pub fn max_keys() -> usize {
    usize::try_from(MAX_KEYS.load(Ordering::Relaxed)).unwrap_or(1)
}

pub fn max_value_length() -> usize {
    usize::try_from(MAX_VALUE_LENGTH.load(Ordering::Relaxed)).unwrap_or(0)
}

/// `fencelock.max-result-length` now.
pub fn max_result_length() -> usize {
    usize::try_from(MAX_RESULT_LENGTH.load(Ordering::Relaxed)).unwrap_or(0)
}

/// Whether waits are checked for deadlocks now.
pub fn deadlock_detection() -> bool {
    DEADLOCK_DETECTION.load(Ordering::Relaxed)
}

/// The limits in force now.
pub fn limits() -> Limits {
    Limits::from_configs(
        MAX_TTL_MS.load(Ordering::Relaxed),
        MAX_WAITERS.load(Ordering::Relaxed),
        MAX_TOKEN_LENGTH.load(Ordering::Relaxed),
        MAX_HOLDERS.load(Ordering::Relaxed),
    )
}

/// The lock-delay a holding gets without `LOCKDELAY`: `fencelock.lock-delay`, at most
/// `fencelock.max-ttl` (an operator who lowers one need not remember the other).
pub fn default_lock_delay_ms(limits: &Limits) -> u64 {
    let delay = LOCK_DELAY_MS.load(Ordering::Relaxed).min(limits.max_ttl_ms);
    u64::try_from(delay).unwrap_or(0)
}

/// One numeric config: name (after `fencelock.`), where it lives, default and range.
pub struct Setting {
    pub name: &'static str,
    pub value: &'static AtomicI64,
    pub default: i64,
    pub min: i64,
    pub max: i64,
}

/// One `yes`/`no` config: name (after `fencelock.`), where it lives, default.
pub struct Switch {
    pub name: &'static str,
    pub value: &'static AtomicBool,
    pub default: bool,
}

/// Registers `settings` and `switches`, taking `loadmodule` arguments (`name value`
/// pairs) as their starting values, then lets Redis apply `fencelock.*` lines from the
/// config file or `MODULE LOADEX … CONFIG`. Any unknown name or out-of-range value
/// fails the load.
pub fn register(
    ctx: &Context,
    args: &[RedisString],
    settings: &[Setting],
    switches: &[Switch],
) -> bool {
    let (starting, switched) = match starting_values(args, settings, switches) {
        Ok(values) => values,
        Err(problem) => {
            ctx.log_warning(&format!("fencelock: {problem}; module not loaded"));
            return false;
        }
    };
    for (switch, start) in switches.iter().zip(switched) {
        switch.value.store(start, Ordering::Relaxed);
        ffi::config::register_bool(ctx, switch.name, switch.value, start);
    }
    for (setting, start) in settings.iter().zip(starting) {
        setting.value.store(start, Ordering::Relaxed);
        ffi::config::register_i64(
            ctx,
            setting.name,
            setting.value,
            start,
            setting.min,
            setting.max,
        );
    }
    if ffi::config::load(ctx) {
        true
    } else {
        ctx.log_warning("fencelock: a fencelock.* config value was refused; module not loaded");
        false
    }
}

/// Each setting's and switch's value from the module arguments, or its default.
fn starting_values(
    args: &[RedisString],
    settings: &[Setting],
    switches: &[Switch],
) -> Result<(Vec<i64>, Vec<bool>), String> {
    let mut values: Vec<i64> = settings.iter().map(|setting| setting.default).collect();
    let mut switched: Vec<bool> = switches.iter().map(|switch| switch.default).collect();
    let mut rest = args;
    while let [name, tail @ ..] = rest {
        let name = String::from_utf8_lossy(name.as_slice());
        let [value, tail @ ..] = tail else {
            return Err(format!("module argument '{name}' has no value"));
        };
        rest = tail;
        let switch = switches
            .iter()
            .zip(switched.iter_mut())
            .find(|(switch, _)| switch.name.eq_ignore_ascii_case(&name));
        if let Some((_, slot)) = switch {
            *slot = match value.as_slice().to_ascii_lowercase().as_slice() {
                b"yes" => true,
                b"no" => false,
                _ => return Err(format!("module argument '{name}' must be yes or no")),
            };
            continue;
        }
        let (setting, slot) = settings
            .iter()
            .zip(values.iter_mut())
            .find(|(setting, _)| setting.name.eq_ignore_ascii_case(&name))
            .ok_or_else(|| format!("unknown module argument '{name}'"))?;
        *slot = parse_integer(value.as_slice())
            .ok()
            .filter(|v| (setting.min..=setting.max).contains(v))
            .ok_or_else(|| {
                format!(
                    "module argument '{name}' must be an integer from {} to {}",
                    setting.min, setting.max
                )
            })?;
    }
    Ok((values, switched))
}
