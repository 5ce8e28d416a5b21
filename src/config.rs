//! Module configuration (`CONFIG GET/SET fencelock.*`, `loadmodule … name value`,
//! `MODULE LOADEX … CONFIG`): the limits commands check on every call.
//!
//! Every way of setting a value is bounds-checked: `CONFIG SET` and `MODULE LOADEX`
//! by Redis against the registered range, `loadmodule` arguments here (Redis takes
//! them as defaults, which it does not check). A bad value refuses the load.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::limits::{
    DEFAULT_MAX_TOKEN_LENGTH, DEFAULT_MAX_TTL_MS, DEFAULT_MAX_WAITERS, MAX_TOKEN_LENGTH,
    MAX_TTL_MS, MAX_WAITERS,
};

use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
use redis_module::{raw, Context, RedisString, Status};

/// One numeric config: name (after `fencelock.`), where it lives, default and range.
struct Setting {
    name: &'static str,
    value: &'static AtomicI64,
    default: i64,
    min: i64,
    max: i64,
}

const SETTINGS: [Setting; 3] = [
    Setting {
        name: "max-ttl",
        value: &MAX_TTL_MS,
        default: DEFAULT_MAX_TTL_MS,
        min: 1,
        max: i64::MAX,
    },
    Setting {
        name: "max-waiters",
        value: &MAX_WAITERS,
        default: DEFAULT_MAX_WAITERS,
        min: 1,
        max: 100_000_000,
    },
    // Tokens are kept in memory for every held lock.
    Setting {
        name: "max-token-length",
        value: &MAX_TOKEN_LENGTH,
        default: DEFAULT_MAX_TOKEN_LENGTH,
        min: 1,
        max: 4096,
    },
];

/// Registers the configs, taking `loadmodule` arguments (`name value` pairs) as their
/// starting values, then lets Redis apply `fencelock.*` lines from the config file or
/// `MODULE LOADEX … CONFIG`. Any unknown name or out-of-range value fails the load.
pub fn register(ctx: &Context, args: &[RedisString]) -> Status {
    let starting = match starting_values(args) {
        Ok(values) => values,
        Err(problem) => {
            ctx.log_warning(&format!("fencelock: {problem}; module not loaded"));
            return Status::Err;
        }
    };
    for (setting, start) in SETTINGS.iter().zip(starting) {
        setting.value.store(start, Ordering::Relaxed);
        register_i64_configuration(
            ctx,
            setting.name,
            setting.value,
            start,
            setting.min,
            setting.max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    let loaded = api!(RedisModule_LoadConfigs)
        // SAFETY: called once, during load, after every config is registered.
        .is_none_or(|load| unsafe { load(ctx.ctx) } == raw::REDISMODULE_OK as i32);
    if loaded {
        Status::Ok
    } else {
        ctx.log_warning("fencelock: a fencelock.* config value was refused; module not loaded");
        Status::Err
    }
}

/// Each setting's value from the module arguments, or its default.
fn starting_values(args: &[RedisString]) -> Result<[i64; 3], String> {
    let mut values = SETTINGS.map(|setting| setting.default);
    let mut rest = args;
    while let [name, tail @ ..] = rest {
        let name = String::from_utf8_lossy(name.as_slice());
        let (setting, slot) = SETTINGS
            .iter()
            .zip(values.iter_mut())
            .find(|(setting, _)| setting.name.eq_ignore_ascii_case(&name))
            .ok_or_else(|| format!("unknown module argument '{name}'"))?;
        let [value, tail @ ..] = tail else {
            return Err(format!("module argument '{name}' has no value"));
        };
        *slot = crate::commands::args::parse_integer(value.as_slice())
            .ok()
            .filter(|v| (setting.min..=setting.max).contains(v))
            .ok_or_else(|| {
                format!(
                    "module argument '{name}' must be an integer from {} to {}",
                    setting.min, setting.max
                )
            })?;
        rest = tail;
    }
    Ok(values)
}
