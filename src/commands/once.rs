//! `LOCK.ONCE key ttl-ms KEEP keep-ms [BLOCK timeout-ms] [TOKEN token] [SESSION
//! session] [FINGERPRINT fp]`: claim the one run of `key`. Nobody ran or runs it: the
//! caller runs it, `[token, fence]`, holding an exclusive lock with that lease. It is
//! running (or the key is held as a plain lock): nil, or with `BLOCK` a wait in FIFO
//! order, ended by `LOCK.DONE` with the result or by the run's end without it with the
//! next run. It is done: `[nil, fence, result]` at once, until `keep-ms` after the
//! result was stored. A fingerprint other than the key's is refused (`FINGERPRINT`).

use std::borrow::Cow;

use fencelock_core::args::{parse_options_and_flags, parse_session, parse_timeout, parse_ttl};
use fencelock_core::compared_token::parse_compared_token;
use fencelock_core::error::CommandError;
use fencelock_core::holding::MAX_TOKEN_BYTES;
use fencelock_core::limits::Limits;
use fencelock_core::lock;
use fencelock_core::mode::Mode;
use fencelock_core::once::{
    claim_step, fingerprint_admitted, parse_keep, ClaimRequest, ClaimStep, Found,
};
use fencelock_core::token::Generated;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::acquire::{checked_token, lease_deadline};
use super::support::error_replies::{to_redis, to_redis_on};
use crate::blocking::{self, OnceWanted, Wanted};
use crate::config;
use crate::ffi::argv::{entry, Command};
use crate::ffi::command_table::{CommandSpec, Keys, ACCESS, RW, UPDATE};
use crate::ffi::lock_key::LockKey;
use crate::ffi::reply;
use crate::ffi::server::{self, selected_db};
use crate::ffi::server_clock as clock;
use crate::keyspace::effects::{self, Change};
use crate::keyspace::once::{self, NewRun};
use crate::node_fence;
use crate::stats;

const NAME: &str = "lock.once";

pub struct Once;

impl Command for Once {
    const NAME: &'static str = NAME;

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let limits = config::limits();
        let request = parse(args, &limits).map_err(to_redis)?;
        blocking::counting_wait(request.asked.block_ms.is_some(), || {
            claim(ctx, &request, &limits)
        })
        .map_err(to_redis_on(request.key.as_slice()))
    }
}

/// How Redis registers and describes the command (collected by `lib.rs`).
pub const SPEC: CommandSpec = CommandSpec {
    name: Once::NAME,
    entry: Some(entry::<Once>),
    flags: c"write blocking",
    categories: "write blocking",
    replication_form: false,
    summary: "Claims the one run of a key: [token, fence] to run it, [nil, fence, result] once it is done, nil (or a FIFO wait) while it runs.",
    since: c"0.4.0",
    complexity: c"O(1) (plus the length of the result replayed)",
    arity: -5,
    keys: Keys::One(RW.with(ACCESS).with(UPDATE)),
};

struct Request<'a> {
    key: &'a RedisString,
    asked: Wanted<'a>,
    keep_ms: u64,
    fingerprint: Option<&'a [u8]>,
}

fn parse<'a>(args: &'a [RedisString], limits: &Limits) -> Result<Request<'a>, CommandError> {
    let [_, key, ttl, options @ ..] = args else {
        return Err(CommandError::WrongArity);
    };
    let options: Vec<&[u8]> = options.iter().map(RedisString::as_slice).collect();
    let ([keep, block, token, session, fingerprint], []) = parse_options_and_flags(
        &options,
        ["KEEP", "BLOCK", "TOKEN", "SESSION", "FINGERPRINT"],
        [],
    )?;
    let ttl_ms = parse_ttl(ttl.as_slice(), NAME, limits.max_ttl_ms)?;
    // The keep time is not optional: a claim says how long its result answers.
    let keep_ms = parse_keep(keep.ok_or(CommandError::Syntax)?, NAME, limits.max_ttl_ms)?;
    let token = token
        .map(|token| parse_compared_token(token, limits.max_token_length))
        .transpose()?
        .map(|token| Cow::Borrowed(token.bytes));
    let block_ms = block.map(parse_timeout).transpose()?;
    let session = session
        .map(|session| parse_session(session, MAX_TOKEN_BYTES))
        .transpose()?;
    // Any fingerprint a record can hold: one over today's limit is decided at the key
    // (`fingerprint_admitted`).
    let fingerprint = fingerprint
        .map(|fp| parse_fingerprint(fp, MAX_TOKEN_BYTES))
        .transpose()?;
    let asked = Wanted {
        ttl_ms,
        token,
        block_ms,
        mode: Mode::Exclusive,
        session: session.map(Cow::Borrowed),
        // A run has no lock-delay: a run given up goes to the next claim at once.
        lock_delay_ms: 0,
        value: None,
        all_keys: false,
        // What the claim's wait keeps besides (`OnceWanted`) is known once it waits.
        once: None,
    };
    Ok(Request {
        key,
        asked,
        keep_ms,
        fingerprint,
    })
}

/// A fingerprint is 1 to `max_len` bytes (a digest of the request).
fn parse_fingerprint(bytes: &[u8], max_len: usize) -> Result<&[u8], CommandError> {
    if bytes.is_empty() || bytes.len() > max_len {
        return Err(CommandError::InvalidFingerprint);
    }
    Ok(bytes)
}

fn claim(ctx: &Context, request: &Request, limits: &Limits) -> Result<RedisValue, CommandError> {
    let name = request.key;
    let asked = &request.asked;
    let mut key = LockKey::open(ctx, name, true);
    let now_ms = clock::command_ms();
    effects::drop_ended(ctx, &mut key, now_ms)?;
    // Waiters first: a run given up and not yet handed over goes to the first of them.
    blocking::hand_off(ctx, &mut key);
    let generated = asked.token.is_none().then(Generated::fresh);
    let token = checked_token(asked, generated.as_ref(), &key, now_ms, limits)?;
    let deadline_ms = lease_deadline(asked, now_ms, limits, NAME)?;
    let keep_ms = request.keep_ms;
    let claim = ClaimRequest {
        token: asked.token.as_deref(),
        fingerprint: request.fingerprint,
        session: asked.session.as_deref(),
        queued_before: blocking::is_queued(ctx, name.as_slice()),
    };
    let found = Found::of(key.lock()?, key.once());
    if !fingerprint_admitted(found, request.fingerprint, limits.max_token_length) {
        return Err(CommandError::InvalidFingerprint);
    }
    let step = claim_step(found, &claim);
    match step {
        ClaimStep::Run => {
            if server::out_of_memory(ctx) {
                return Err(CommandError::OutOfMemory);
            }
            let issued = node_fence::with_clock(|fences| lock::issue(fences, clock::now_micros()));
            let lock::Acquire::Granted { fence } = issued else {
                return Err(CommandError::FencesExhausted);
            };
            let new = NewRun {
                token,
                generated: generated.as_ref(),
                fence,
                deadline_ms,
                session: asked.session.as_deref(),
                keep_ms,
                fingerprint: request.fingerprint,
            };
            once::run(ctx, &mut key, &new)?;
            blocking::after(ctx, &mut key, Change::Granted(Mode::Exclusive));
            reply::grant(ctx, token, fence);
            Ok(RedisValue::NoReply)
        }
        ClaimStep::Renew { fence } => {
            let change = effects::extend(ctx, &mut key, token, deadline_ms)?;
            blocking::after(ctx, &mut key, change);
            reply::grant(ctx, token, fence);
            Ok(RedisValue::NoReply)
        }
        ClaimStep::Replay { fence, result } => {
            stats::ONCE_REPLAYS.bump();
            reply::replay(ctx, fence, result);
            Ok(RedisValue::NoReply)
        }
        ClaimStep::FingerprintRefused => {
            stats::ONCE_FINGERPRINT_REFUSED.bump();
            Err(CommandError::Fingerprint)
        }
        ClaimStep::WrongSession => Err(CommandError::WrongSession),
        ClaimStep::Busy => {
            let next_change = effects::next_lease_end(&key, clock::command_ms());
            let once = OnceWanted {
                key: (selected_db(ctx), name.as_slice().to_vec()),
                keep_ms,
                fingerprint: request.fingerprint.map(<[u8]>::to_vec),
            };
            let wanted = Wanted {
                once: Some(once),
                ..asked.clone()
            };
            blocking::wait(ctx, &[(name, next_change)], &wanted, limits.max_waiters)
        }
    }
}
