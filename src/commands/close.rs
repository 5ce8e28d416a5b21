//! `LOCK.CLOSE session` → the number of holdings of `session` released on this server.
//! Each goes as `LOCK.RELEASE` would let it go (handed to its queue, propagated as its
//! effect); the session's waiting acquires are answered nil first, so none of them is
//! handed a lock the session is letting go of.

use fencelock_core::error::CommandError;
use fencelock_core::lock;
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::errors::to_redis;
use super::session::{self, by_key, check_permissions, in_each_db};
use crate::blocking;
use crate::keyspace::effects;
use crate::rm::acl::Access;
use crate::rm::argv::Command;
use crate::rm::clock;
use crate::rm::key::LockKey;
use crate::stats;

pub struct Close;

impl Command for Close {
    const NAME: &'static str = "lock.close";

    fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
        let [_, session] = args else {
            return Err(to_redis(CommandError::WrongArity));
        };
        let session = session::parse(session).map_err(to_redis)?;
        let found = session::holdings(ctx, session);
        check_permissions(ctx, &found, Access::Write)?;
        blocking::end_session_waits(ctx, session);
        let now_ms = clock::command_ms();
        let mut released = 0i64;
        in_each_db(ctx, by_key(found), |ctx, key, holdings| {
            let name = RedisString::create_from_slice(ctx.ctx, &key.1);
            let mut open = LockKey::open(ctx, &name, true);
            if effects::drop_ended(ctx, &mut open, now_ms).is_err() {
                return;
            }
            for holding in holdings {
                if !lock::is_holder(open.lock().ok().flatten(), &holding.token, now_ms) {
                    continue;
                }
                if let Ok(change) = effects::release(ctx, &mut open, &holding.token) {
                    blocking::after(ctx, &mut open, change);
                    released += 1;
                }
            }
        });
        stats::CLOSES.bump();
        Ok(RedisValue::Integer(released))
    }
}
