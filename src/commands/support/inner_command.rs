//! The command a guard or a fence check runs inside: whether it may run there, and in
//! a cluster, whether its keys share the slot of the lock or mark key.

use fencelock_core::error::CommandError;
use fencelock_core::fence_checks::{allowed_inside, same_slot};
use redis_module::{Context, RedisString};

use crate::ffi::getkeys;
use crate::ffi::server;

/// `inner` is the command with its arguments; `first` the lock or mark key. Returns
/// the inner command's key names when it had to look them up (in a cluster), so that
/// a caller needing them too does not ask Redis twice.
pub fn check<'a>(
    ctx: &Context,
    first: &RedisString,
    inner: &'a [RedisString],
) -> Result<Option<Vec<&'a [u8]>>, CommandError> {
    let [command, args @ ..] = inner else {
        return Err(CommandError::WrongArity);
    };
    let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    allowed_inside(command.as_slice(), &args)?;
    if !server::in_cluster(ctx) {
        return Ok(None);
    }
    let names = getkeys::inner_key_names(ctx, inner);
    same_slot(first.as_slice(), &names)?;
    Ok(Some(names))
}
