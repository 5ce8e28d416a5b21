//! Writing the grants of several keys at once (`LOCK.ACQUIREALL`, and the handoff of a
//! wait for several keys): all of them or none. Every key's step is decided first; then
//! every fresh fence is issued (`plan`) before any key is written (`write`), so a fence
//! clock at its end refuses the whole grant, and a write that fails half-way gives back
//! the grants already made (`give_back`). Each key's effect is propagated as for one key; one command
//! (or one timer) makes them, so Redis wraps them in one transaction.

use fencelock_core::error::CommandError;
use fencelock_core::holding::Extras;
use fencelock_core::lock::{self, Acquire, Step};
use fencelock_core::mode::Mode;
use fencelock_core::token::Generated;

use super::effects::{self, Change, NewHolder};
use crate::ffi::lock_key::LockKey;
use crate::ffi::server_clock;
use crate::node_fence;
use redis_module::Context;

/// What every key is granted with.
pub struct Grant<'a> {
    pub token: &'a [u8],
    /// The token was generated for this grant.
    pub generated: Option<&'a Generated>,
    pub mode: Mode,
    pub deadline_ms: i64,
    pub extras: Extras<'a>,
}

/// One key's part of a grant: its fence, and whether it is new (not a renewal).
#[derive(Clone, Copy, Debug)]
pub struct KeyGrant {
    pub fence: u64,
    pub fresh: bool,
    pub change: Change,
}

/// Issues the fresh fences of a grant whose steps are `steps` (each `Admit` or `Renew`):
/// each key's fence and whether it is new. Nothing is written yet.
pub fn plan(steps: &[Step]) -> Result<Vec<(u64, bool)>, CommandError> {
    steps
        .iter()
        .map(|step| match step {
            Step::Admit => {
                let issued = node_fence::with_clock(|fences| {
                    lock::issue(fences, server_clock::now_micros())
                });
                match issued {
                    Acquire::Granted { fence } => Ok((fence, true)),
                    _ => Err(CommandError::FencesExhausted),
                }
            }
            Step::Renew { fence } => Ok((*fence, false)),
            Step::Busy | Step::WrongMode(_) | Step::WrongSession => Err(CommandError::WriteFailed),
        })
        .collect()
}

/// Writes one key's part of a grant planned by `plan`.
pub fn write(
    ctx: &Context,
    key: &mut LockKey,
    grant: &Grant,
    (fence, fresh): (u64, bool),
) -> Result<KeyGrant, CommandError> {
    let change = if fresh {
        let new = NewHolder {
            token: grant.token,
            fence,
            deadline_ms: grant.deadline_ms,
            mode: grant.mode,
            generated: grant.generated,
            extras: grant.extras,
            now_us: server_clock::now_micros(),
        };
        effects::grant(ctx, key, &new)?
    } else {
        let change = effects::extend(ctx, key, grant.token, grant.deadline_ms)?;
        // A retry that names a value sets it on every key, the ones it held too, as a
        // single-key retry does.
        if let Some(value) = grant.extras.value.filter(|_| grant.mode == Mode::Exclusive) {
            effects::proclaim(ctx, key, value)?;
        }
        change
    };
    Ok(KeyGrant {
        fence,
        fresh,
        change,
    })
}

/// Takes back one key's part of a grant that could not be made whole.
pub fn give_back(ctx: &Context, key: &mut LockKey, made: &KeyGrant, token: &[u8]) {
    if made.fresh {
        // A failed release leaves a holding its lease ends.
        let _ = effects::release(ctx, key, token);
    }
}
