//! `LOCK.FENCED mark fence command [arg ...]` → the command's own reply, if `fence` is at
//! least the highest fence the mark `mark` admitted so far (the mark then holds
//! `fence`), else `-STALE fence is below the highest admitted (<highest>)` and nothing
//! runs. Kleppmann's storage-side check, for locks that live elsewhere. The inner
//! command runs as the calling user, under script rules, and replicates its own
//! effects; the mark's rise replicates as `LOCK.MARK mark fence`.

use fencelock_core::error::CommandError;
use fencelock_core::fencing::{admit, allowed_inside, parse_fence, Admission};
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::errors::to_redis;
use crate::keyspace::effects;
use crate::rm::argv::Command;
use crate::rm::call::call_and_forward;
use crate::rm::keys;
use crate::rm::mark_key::MarkKey;
use crate::stats;

/// Where the inner command starts in argv.
const INNER: usize = 3;

pub struct Fenced;

impl Command for Fenced {
    const NAME: &'static str = "lock.fenced";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let [_, mark, fence, command, inner_args @ ..] = args else {
            return Err(RedisError::WrongArity);
        };
        if keys::is_position_request(ctx) {
            keys::declare(ctx, 1, keys::UPDATE);
            keys::declare_inner(ctx, &args[INNER..], INNER);
            return Ok(RedisValue::NoReply);
        }
        admit_fence(ctx, mark, fence, command, inner_args).map_err(to_redis)?;
        stats::FENCED.bump();
        call_and_forward(ctx, &args[INNER..], true)
    }
}

/// Admits `fence` against the mark (raising it) or refuses it. The mark key is closed
/// again before the command runs.
fn admit_fence(
    ctx: &Context,
    mark: &RedisString,
    fence: &RedisString,
    command: &RedisString,
    inner_args: &[RedisString],
) -> Result<(), CommandError> {
    let fence = parse_fence(fence.as_slice())?;
    let inner: Vec<&[u8]> = inner_args.iter().map(RedisString::as_slice).collect();
    allowed_inside(command.as_slice(), &inner)?;
    let key = MarkKey::open(ctx, mark);
    match admit(key.highest()?, fence) {
        Admission::Admit { raise: true } => effects::raise_mark(ctx, &key, mark, fence),
        Admission::Admit { raise: false } => Ok(()),
        Admission::Stale { highest } => {
            stats::FENCED_STALE.bump();
            Err(CommandError::Stale(highest))
        }
    }
}
