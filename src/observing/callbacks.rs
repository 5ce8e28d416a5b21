//! What happens at each turn of a blocked `LOCK.OBSERVE`: the reply (the state that
//! differed, or nil when its `BLOCK` timeout ended the wait), `CLIENT UNBLOCK` (nil)
//! and a disconnect (also `CLIENT UNBLOCK … ERROR`).

use fencelock_core::error::{CommandError, MOVED};
use fencelock_core::observe::Observed;
use redis_module::{Context, RedisError, RedisValue};

use super::remove;
use crate::ffi::blocked::{self, BlockedClient, Waiting};

/// A blocked `LOCK.OBSERVE`.
pub(super) struct ObserverWaiting;

/// What an observer is unblocked with.
pub(super) enum Answer {
    /// The lock's state, which differs from what the observer knew.
    Changed(Observed),
    /// The key moved to another node (`MIGRATE`): `TRYAGAIN` there.
    Moved,
    /// The key holds another type now (`SET` over it, `RENAME` of a string onto it).
    WrongType,
}

/// `[fence, value]`, the value nil when no holding is exclusive.
pub fn observed_reply(observed: &Observed) -> RedisValue {
    let fence = i64::try_from(observed.fence).unwrap_or(i64::MAX);
    let value = match &observed.value {
        Some(value) => RedisValue::StringBuffer(value.clone()),
        None => RedisValue::Null,
    };
    RedisValue::Array(vec![RedisValue::Integer(fence), value])
}

impl Waiting for ObserverWaiting {
    type Delivery = Answer;
    const NAME: &'static str = "a blocked LOCK.OBSERVE";

    fn reply(ctx: &Context, delivery: Option<&mut Answer>) {
        match delivery {
            Some(Answer::Changed(observed)) => ctx.reply(Ok(observed_reply(observed))),
            Some(Answer::Moved) => ctx.reply(Err(RedisError::Str(MOVED))),
            Some(Answer::WrongType) => {
                let text = CommandError::WrongType.message().into_owned();
                ctx.reply(Err(RedisError::String(text)))
            }
            None => ctx.reply(Ok(RedisValue::Null)),
        };
    }

    fn client_unblocked(ctx: &Context, client: BlockedClient) {
        if remove(ctx, client, None) {
            // Redis frees the handle only once we unblock it.
            blocked::unblock::<ObserverWaiting>(client, None);
        }
        ctx.reply(Ok(RedisValue::Null));
    }

    fn disconnected(ctx: &Context, client: BlockedClient) {
        // An answered observer was already unblocked.
        if remove(ctx, client, None) {
            blocked::unblock::<ObserverWaiting>(client, None);
        }
    }

    fn free(_ctx: &Context, _delivery: Answer) {}
}
