//! `LOCK.OBSERVE key [fence value] [BLOCK timeout-ms]` → `[fence, value]`: the exclusive
//! holder's fence and public value ("" when it set none), `[highest fence, nil]` for a
//! lock held shared, `[0, nil]` when nobody holds it. Without `fence value` it answers
//! at once; with them, as soon as the lock's state differs from that pair (nil is known
//! as ""), or nil when it does not differ and the caller did not `BLOCK`, or when the
//! `BLOCK` timeout passes first. Observers never queue for the lock; they wait in
//! `observing`. Read-only: a replica's observers hear what replication changes.

use fencelock_core::error::CommandError;
use fencelock_core::observe::{self, Observed};
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::support::error_replies::to_redis;
use crate::blocking;
use crate::config;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, ACCESS, RO};
use crate::ffi::lock_key::LockKey;
use crate::ffi::server_clock;
use crate::observing;

pub struct Observe;

impl Command for Observe {
    const NAME: &'static str = "lock.observe";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        observe(ctx, args).map_err(to_redis)
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Observe::NAME,
    entry: Some(entry::<Observe>),
    flags: c"readonly blocking",
    categories: "read blocking",
    replication_form: false,
    summary: "Returns [fence, value] of the lock's holder once it differs from the state the caller knows, optionally waiting.",
    since: c"0.3.0",
    complexity: c"O(1); a change answers each of the key's N observers, O(N)",
    arity: -2,
    keys: Keys::One(RO.with(ACCESS)),
};

fn observe(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, CommandError> {
    let [_, name, rest @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let rest: Vec<&[u8]> = rest.iter().map(RedisString::as_slice).collect();
    let asked = observe::parse(&rest)?;
    let key = LockKey::open(ctx, name, false);
    let current = Observed::of(key.lock()?, server_clock::command_ms());
    let Some(known) = asked.known.filter(|known| current.is(known)) else {
        return Ok(observing::observed_reply(&current));
    };
    let max_waiters = config::limits().max_waiters;
    blocking::wait_for_change(ctx, &key, known, asked.block_ms, max_waiters)
}
