//! The command layer: one file per command. Each parses argv into a typed request,
//! opens the key, asks the pure core what happens, applies and replicates the effect
//! (`effects`), and replies. Error texts live in `errors`.

pub mod acquire;
pub mod apply;
pub mod args;
pub mod effects;
pub mod errors;
pub mod fence;
pub mod info;
pub mod refresh;
pub mod release;

use redis_module::{Context, RedisString};

use crate::lock::Holding;
use crate::store::LockKey;
use errors::CommandError;

/// Opens `name`, failing with WRONGTYPE if it is not a lock key. The reader gets the
/// open key and its current holding (if held).
fn with_lock_key<T>(
    ctx: &Context,
    name: &RedisString,
    writable: bool,
    read: impl FnOnce(&LockKey, Option<&Holding>) -> Result<T, CommandError>,
) -> Result<T, CommandError> {
    let key = LockKey::open(ctx, name, writable);
    let holding = key.holding()?.cloned();
    read(&key, holding.as_ref())
}
