//! The lock-cycle recipes: acquire with a fence, then release, on random keys.
//! fencelock: `LOCK.ACQUIRE` (token and fence in the reply), `LOCK.RELEASE` with that
//! token — 2 commands. The Lua pattern: `SET NX PX`, then `INCR fence:key` once the
//! `SET` succeeded, then the `EVALSHA` release — 3 commands. Each step waits for the
//! reply it depends on; pipelining overlaps many cycles, never the steps of one.

use crate::load::{client_token, Keys, Op, Outcome, Recipe};
use crate::lua::{fence_key, lock_key, Scripts};
use crate::recipes::TTL;
use crate::resp::{encode, Reply};

/// Keyspace the random keys come from: large enough that two cycles in flight
/// rarely pick the same key (a collision is counted as busy and retried).
pub const KEYSPACE: u64 = 10_000_000;

pub struct FencelockCycle;

impl Recipe for FencelockCycle {
    fn keys(&self) -> Keys {
        Keys::Random(KEYSPACE)
    }

    fn command(&self, _conn: usize, op: &Op, out: &mut Vec<u8>) {
        let key = lock_key(op.key);
        if op.step == 0 {
            encode(out, &[b"LOCK.ACQUIRE", key.as_bytes(), TTL]);
        } else {
            encode(out, &[b"LOCK.RELEASE", key.as_bytes(), &op.token]);
        }
    }

    fn reply(&self, op: &mut Op, reply: Reply) -> Outcome {
        match (op.step, &reply) {
            (0, Reply::Nil) => Outcome::Busy,
            (0, _) => match reply.grant() {
                Some((token, _fence)) => {
                    op.token = token.to_vec();
                    Outcome::Next
                }
                None => Outcome::Unexpected(format!("LOCK.ACQUIRE replied {reply:?}")),
            },
            (_, Reply::Integer(1)) => Outcome::Done,
            _ => Outcome::Unexpected(format!("LOCK.RELEASE replied {reply:?}")),
        }
    }
}

pub struct LuaCycle {
    pub scripts: Scripts,
}

impl Recipe for LuaCycle {
    fn keys(&self) -> Keys {
        Keys::Random(KEYSPACE)
    }

    fn command(&self, conn: usize, op: &Op, out: &mut Vec<u8>) {
        let key = lock_key(op.key);
        let token = client_token(conn);
        match op.step {
            0 => encode(out, &[b"SET", key.as_bytes(), &token, b"NX", b"PX", TTL]),
            1 => encode(out, &[b"INCR", fence_key(op.key).as_bytes()]),
            _ => encode(
                out,
                &[
                    b"EVALSHA",
                    &self.scripts.release,
                    b"1",
                    key.as_bytes(),
                    &token,
                ],
            ),
        }
    }

    fn reply(&self, op: &mut Op, reply: Reply) -> Outcome {
        match (op.step, &reply) {
            (0, Reply::Nil) => Outcome::Busy,
            (0, _) if reply.is_ok() => Outcome::Next,
            (1, Reply::Integer(_)) => Outcome::Next,
            (2, Reply::Integer(1)) => Outcome::Done,
            _ => Outcome::Unexpected(format!("step {} replied {reply:?}", op.step)),
        }
    }
}
