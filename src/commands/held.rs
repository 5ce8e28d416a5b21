//! `LOCK.HELD session` → `[[key, mode, fence, pttl], …]`: the live holdings of `session`
//! on this server, in grant order (ascending fence); `pttl` is what is left of each
//! lease in ms, -1 for a lock made permanent. Read-only: a replica answers as its
//! primary would.

use fencelock_core::error::CommandError;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use super::support::session_holdings::{self, check_permissions};
use crate::ffi::acl::AsCommand;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys};
use crate::ffi::server_clock;

pub struct Held;

impl Command for Held {
    const NAME: &'static str = "lock.held";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let [_, session] = args else {
            return Err(to_redis(CommandError::WrongArity));
        };
        let session = session_holdings::parse(session).map_err(to_redis)?;
        let found = session_holdings::holdings(ctx, session);
        check_permissions(ctx, &found, &[], AsCommand::Info)?;
        let now_ms = server_clock::command_ms();
        let entries = found
            .into_iter()
            .map(|holding| {
                let pttl = holding
                    .deadline_ms
                    .map_or(-1, |deadline| deadline.saturating_sub(now_ms).max(0));
                RedisValue::Array(vec![
                    RedisValue::StringBuffer(holding.key.1.into_vec()),
                    RedisValue::SimpleStringStatic(holding.mode.name()),
                    RedisValue::Integer(i64::try_from(holding.fence).unwrap_or(i64::MAX)),
                    RedisValue::Integer(pttl),
                ])
            })
            .collect();
        Ok(RedisValue::Array(entries))
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
/// A session command names no key: it finds the session's keys itself, and checks
/// the caller's permissions for each (Redis cannot).
pub const SPEC: CommandSpec = CommandSpec {
    name: Held::NAME,
    entry: Some(entry::<Held>),
    flags: c"readonly",
    categories: "read",
    replication_form: false,
    summary: "Lists the holdings of a session on this server: [key, mode, fence, pttl] each.",
    since: c"0.3.0",
    complexity: c"O(n log n) in the session's holdings here",
    arity: 2,
    keys: Keys::Declared,
};
