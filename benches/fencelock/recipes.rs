//! The per-command recipes of the throughput scenario, fencelock and the Lua pattern
//! side by side, plus the untimed set-up recipes that make the hit paths hits (keys
//! already held by the token the timed run presents).

use crate::load::{client_token, Keys, Op, Outcome, Recipe};
use crate::lua::{fence_key, lock_key, Scripts};
use crate::resp::{encode, Reply};

/// Lease given by timed acquires (long enough never to expire during a run).
pub const TTL: &[u8] = b"30000";
/// Lease of keys set up for release/refresh/fence runs, and what refresh asks for.
pub const LONG_TTL: &[u8] = b"600000";
/// Keys each connection refreshes or reads in turn.
pub const HELD_PER_CONN: u64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `LOCK.ACQUIRE key ttl` on a fresh key (server-generated token).
    LockAcquire,
    /// `SET key token NX PX ttl` on a fresh key.
    SetNxPx,
    /// `SET key token NX PX ttl`, then on success `INCR fence:key`: the fenced grant.
    SetNxPxIncr,
    /// `LOCK.RELEASE key token` on a key the token holds.
    LockRelease,
    /// `EVALSHA release 1 key token` on a key the token holds.
    LuaRelease,
    /// `LOCK.REFRESH key token ttl` on a key the token holds.
    LockRefresh,
    /// `EVALSHA refresh 1 key token ttl` on a key the token holds.
    LuaRefresh,
    /// `LOCK.FENCE key` on a held key.
    LockFence,
    /// `GET key` on a held key.
    Get,
    /// Set-up: `LOCK.ACQUIRE key ttl TOKEN token`.
    HoldWithFencelock,
    /// Set-up: `SET key token PX ttl`.
    HoldWithSet,
}

pub struct CommandRecipe {
    pub command: Command,
    pub keys: Keys,
    pub scripts: Scripts,
}

impl CommandRecipe {
    pub fn new(command: Command, keys: Keys, scripts: &Scripts) -> Self {
        Self {
            command,
            keys,
            scripts: scripts.clone(),
        }
    }
}

fn unexpected(what: &str, reply: &Reply) -> Outcome {
    Outcome::Unexpected(format!("{what}: expected a hit, got {reply:?}"))
}

impl Recipe for CommandRecipe {
    fn keys(&self) -> Keys {
        self.keys
    }

    fn command(&self, conn: usize, op: &Op, out: &mut Vec<u8>) {
        let key = lock_key(op.key);
        let key = key.as_bytes();
        let token = client_token(conn);
        let token = &token[..];
        match (self.command, op.step) {
            (Command::LockAcquire, _) => encode(out, &[b"LOCK.ACQUIRE", key, TTL]),
            (Command::SetNxPx, _) | (Command::SetNxPxIncr, 0) => {
                encode(out, &[b"SET", key, token, b"NX", b"PX", TTL])
            }
            (Command::SetNxPxIncr, _) => encode(out, &[b"INCR", fence_key(op.key).as_bytes()]),
            (Command::LockRelease, _) => encode(out, &[b"LOCK.RELEASE", key, token]),
            (Command::LuaRelease, _) => {
                encode(out, &[b"EVALSHA", &self.scripts.release, b"1", key, token])
            }
            (Command::LockRefresh, _) => encode(out, &[b"LOCK.REFRESH", key, token, LONG_TTL]),
            (Command::LuaRefresh, _) => encode(
                out,
                &[
                    b"EVALSHA",
                    &self.scripts.refresh,
                    b"1",
                    key,
                    token,
                    LONG_TTL,
                ],
            ),
            (Command::LockFence, _) => encode(out, &[b"LOCK.FENCE", key]),
            (Command::Get, _) => encode(out, &[b"GET", key]),
            (Command::HoldWithFencelock, _) => {
                encode(out, &[b"LOCK.ACQUIRE", key, LONG_TTL, b"TOKEN", token])
            }
            (Command::HoldWithSet, _) => encode(out, &[b"SET", key, token, b"PX", LONG_TTL]),
        }
    }

    fn reply(&self, op: &mut Op, reply: Reply) -> Outcome {
        let hit = match self.command {
            Command::LockAcquire | Command::HoldWithFencelock => reply.grant().is_some(),
            Command::SetNxPx | Command::HoldWithSet => reply.is_ok(),
            Command::SetNxPxIncr if op.step == 0 => {
                return if reply.is_ok() {
                    Outcome::Next
                } else {
                    unexpected("SET NX PX", &reply)
                };
            }
            Command::SetNxPxIncr => reply.integer().is_some(),
            Command::LockRelease
            | Command::LuaRelease
            | Command::LockRefresh
            | Command::LuaRefresh => reply.integer() == Some(1),
            Command::LockFence => reply.integer().is_some_and(|fence| fence > 0),
            Command::Get => reply.bulk().is_some(),
        };
        if hit {
            Outcome::Done
        } else {
            unexpected(&format!("{:?}", self.command), &reply)
        }
    }
}
