//! `LOCK.CLOSE session` → the number of holdings of `session` released on this server.
//! Each goes as `LOCK.RELEASE` would let it go (handed to its queue, propagated as its
//! effect); the session's waiting acquires are answered nil first, so none of them is
//! handed a lock the session is letting go of.

use fencelock_core::error::CommandError;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use super::support::session_holdings::{self, change_each, check_permissions};
use crate::blocking;
use crate::ffi::acl::AsCommand;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys};
use crate::keyspace::effects;
use crate::stats;

pub struct Close;

impl Command for Close {
    const NAME: &'static str = "lock.close";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let [_, session] = args else {
            return Err(to_redis(CommandError::WrongArity));
        };
        let session = session_holdings::parse(session).map_err(to_redis)?;
        let found = session_holdings::holdings(ctx, session);
        // Ending its waits touches the queues of those keys too.
        let waited_for = blocking::session_wait_keys(session);
        check_permissions(ctx, &found, &waited_for, AsCommand::Release)?;
        blocking::end_session_waits(ctx, session);
        let released = change_each(ctx, found, effects::release);
        stats::CLOSES.bump();
        Ok(RedisValue::Integer(released))
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
/// A session command names no key: it finds the session's keys itself, and checks
/// the caller's permissions for each (Redis cannot).
pub const SPEC: CommandSpec = CommandSpec {
    name: Close::NAME,
    entry: Some(entry::<Close>),
    flags: c"write",
    categories: "write",
    replication_form: false,
    summary: "Releases every holding of a session on this server, handing each to its queue.",
    since: c"0.3.0",
    complexity: c"O(n) in the session's holdings here, plus O(w) in all waiters",
    arity: 2,
    keys: Keys::Declared,
};
