//! `LOCK.FENCED mark fence command [arg ...]` → the command's own reply, if `fence` is at
//! least the highest fence the mark `mark` admitted so far, else
//! `-STALE fence is below the highest admitted (<highest>)` and nothing runs.
//! Kleppmann's storage-side check, for locks that live elsewhere. The inner command runs
//! as the calling user, under script rules, and replicates its own effects; once it
//! has run without an error the mark holds `fence` (its rise replicates as
//! `LOCK.MARK mark fence`). A command that is refused, or fails, leaves the mark as it
//! was: it wrote nothing that needs guarding. An inner command that names the mark
//! itself is refused before it runs.

use fencelock_core::error::CommandError;
use fencelock_core::fence_checks::{admit, empties_databases, parse_fence, Admission};
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use super::support::inner_command;
use crate::ffi::argv::{entry, Command};
use crate::ffi::call::call;
use crate::ffi::command_table::{CommandSpec, Keys};
use crate::ffi::getkeys;
use crate::ffi::mark_key::MarkKey;
use crate::keyspace::effects;
use crate::node_fence;
use crate::stats;

/// Where the inner command starts in argv.
const INNER: usize = 3;

pub struct Fenced;

impl Command for Fenced {
    const NAME: &'static str = "lock.fenced";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let [_, mark, fence, _command, ..] = args else {
            return Err(RedisError::WrongArity);
        };
        if getkeys::is_position_request(ctx) {
            getkeys::declare(ctx, 1, getkeys::UPDATE);
            getkeys::declare_inner(ctx, &args[INNER..], INNER);
            return Ok(RedisValue::NoReply);
        }
        let raise = admit_fence(ctx, mark, fence, &args[INNER..]).map_err(to_redis)?;
        let called = call(ctx, &args[INNER..])?;
        if let (Some(fence), false) = (raise, called.is_error()) {
            // The mark is opened for writing only to raise it.
            let key = MarkKey::open(ctx, mark, true);
            effects::raise_mark(ctx, &key, mark, fence).map_err(to_redis)?;
        }
        stats::FENCED.bump();
        called.forward(ctx)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
/// It runs another command, and declares that command's keys when Redis asks.
/// Not `deny-oom`: under `maxmemory` it refuses only what needs new memory itself
/// (`server::out_of_memory`), so a holder keeps its lock.
pub const SPEC: CommandSpec = CommandSpec {
    name: Fenced::NAME,
    entry: Some(entry::<Fenced>),
    flags: c"write getkeys-api",
    categories: "write",
    replication_form: false,
    summary: "Runs a command only with a fence at least the highest the mark admitted.",
    since: c"0.2.0",
    complexity: c"O(1) for the check, plus the inner command's own",
    arity: -4,
    keys: Keys::Declared,
};

/// Whether `fence` is admitted against the mark; `Some(fence)` when the mark must rise
/// to it once the command has run.
fn admit_fence(
    ctx: &Context,
    mark: &RedisString,
    fence: &RedisString,
    inner: &[RedisString],
) -> Result<Option<u64>, CommandError> {
    let fence = parse_fence(fence.as_slice())?;
    let looked_up = inner_command::check(ctx, mark, inner)?;
    let key = MarkKey::open(ctx, mark, false);
    match admit(key.highest()?, node_fence::mark_floor(), fence) {
        // Deleting or overwriting the mark would re-open the door to every older fence.
        Admission::Admit { .. }
            if inner
                .first()
                .is_some_and(|command| empties_databases(command.as_slice()))
                || looked_up
                    .unwrap_or_else(|| getkeys::inner_key_names(ctx, inner))
                    .contains(&mark.as_slice()) =>
        {
            Err(CommandError::OwnMarkInside)
        }
        Admission::Admit { raise } => Ok(raise.then_some(fence)),
        Admission::Stale { highest } => {
            stats::FENCED_STALE.bump();
            Err(CommandError::Stale(highest))
        }
    }
}
