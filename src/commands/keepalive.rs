//! `LOCK.KEEPALIVE session ttl-ms` → the number of holdings of `session` on this server
//! whose lease now ends `ttl-ms` from now, all at once; 0 when it holds nothing here
//! (its holder should take everything it held here as lost). Waiting acquires are not
//! holdings. Each lease moves as `LOCK.REFRESH` moves it, propagated as its effect
//! (`PEXPIREAT`, or the shared holder's `LOCK.APPLY`), all in one transaction.

use fencelock_core::args::parse_ttl;
use fencelock_core::error::CommandError;
use fencelock_core::lock;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use super::support::session_holdings::{self, change_each, check_permissions};
use crate::config;
use crate::ffi::acl::AsCommand;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys};
use crate::ffi::server_clock;
use crate::keyspace::effects;
use crate::stats;

const NAME: &str = "lock.keepalive";

pub struct KeepAlive;

impl Command for KeepAlive {
    const NAME: &'static str = NAME;

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let [_, session, ttl] = args else {
            return Err(to_redis(CommandError::WrongArity));
        };
        let limits = config::limits();
        let ttl_ms = parse_ttl(ttl.as_slice(), NAME, limits.max_ttl_ms).map_err(to_redis)?;
        let session = session_holdings::parse(session).map_err(to_redis)?;
        let found = session_holdings::holdings(ctx, session);
        check_permissions(ctx, &found, &[], AsCommand::Refresh)?;
        let now_ms = server_clock::command_ms();
        // Every lease must fit with its lock-delay after it, or none moves.
        let deadline = lock::lease_deadline(now_ms, ttl_ms, limits.max_ttl_ms)
            .filter(|deadline| {
                found.iter().all(|holding| {
                    let delay = i64::try_from(holding.lock_delay_ms).unwrap_or(i64::MAX);
                    deadline.checked_add(delay).is_some()
                })
            })
            .ok_or(CommandError::InvalidExpire(NAME))
            .map_err(to_redis)?;
        let kept = change_each(ctx, found, |ctx, open, token| {
            effects::extend(ctx, open, token, deadline)
        });
        stats::KEEPALIVES.bump();
        stats::KEPT_ALIVE.add(u64::try_from(kept).unwrap_or(0));
        Ok(RedisValue::Integer(kept))
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
/// A session command names no key: it finds the session's keys itself, and checks
/// the caller's permissions for each (Redis cannot).
pub const SPEC: CommandSpec = CommandSpec {
    name: KeepAlive::NAME,
    entry: Some(entry::<KeepAlive>),
    flags: c"write",
    categories: "write",
    replication_form: false,
    summary: "Restarts the lease of every holding of a session on this server; returns how many.",
    since: c"0.3.0",
    complexity: c"O(n) in the session's holdings here (O(h) per shared lock of h holders)",
    arity: 3,
    keys: Keys::Declared,
};
