//! What the throughput scenarios send, fencelock and the Lua pattern side by side: one
//! `Command` per variant (its commands, the replies that count as a hit, which keys it
//! visits and what untimed set-up makes its hit path a hit).
//!
//! Where the server has them (see `natives`), the Lua-free owner checks a user of that
//! server would pick instead: `DELIFEQ key token`, `DELEX key IFEQ token` and
//! `SET key token IFEQ token PX ttl`.
//!
//! The floor module's commands (`bench/floor`, loaded beside fencelock): the same key
//! work as fencelock's lock commands and nothing else. `FLOOR.ACQUIRE key ttl` on fresh
//! keys as `LOCK.ACQUIRE`; `FLOOR.RELEASE key token` and `FLOOR.REFRESH key token ttl`
//! on keys a set-up `FLOOR.ACQUIRE` holds, with the token it was granted (the floor
//! takes no client token: the set-up keeps each connection's grants, `HeldTokens`).
//!
//! The lock cycles (acquire with a fence, then release, on random keys) are recipes of
//! several steps — fencelock: `LOCK.ACQUIRE` (token and fence in the reply), then
//! `LOCK.RELEASE` with that token; the Lua pattern: `SET NX PX`, `INCR fence:key` once
//! the `SET` succeeded, then the `EVALSHA` release; the native pattern the same with
//! `DELIFEQ` as the release. Each step waits for the reply it depends on; pipelining
//! overlaps many cycles, never the steps of one.
//!
//! The semaphore cycles take and give back one permit of a semaphore shared with the
//! other cycles in flight (`SEMAPHORES` semaphores of `SEMAPHORE_LIMIT` permits, picked
//! at random) — fencelock: `LOCK.ACQUIRE key ttl LIMIT n`, then `LOCK.RELEASE` with the
//! granted token; the ZSET recipe: the semaphore script (`lua::SEMAPHORE`) with a token
//! unique to the operation, then `ZREM key token`.
//!
//! Scenario 9's rows (`election`): `LOCK.ACQUIRE key ttl VALUE v` on fresh keys (as
//! `LOCK.ACQUIRE`); `LOCK.PROCLAIM key token v` on keys the token holds, and the
//! hand-rolled leader key's change of value, `EVALSHA proclaim 1 key old new` (the
//! owner-checked `SET key new XX KEEPTTL`, `lua::PROCLAIM`) on keys a set-up `SET`
//! holds: each visit of a key writes a value of its own (`leader_value` of the visit's
//! number), so every proclaim changes the value, and the script's owner check compares
//! the one the visit before wrote (the set-up's, the token, on the first visit).
//!
//! Run once: a duplicate's replay, `LOCK.ONCE key ttl KEEP keep` on keys a set-up
//! `LOCK.RECORD … DONE` left done, against a `GET` of keys a set-up `SET` gave the same
//! result (`RESULT`); and the whole cycle on random keys — `LOCK.ONCE` (the run, its
//! token kept), `LOCK.DONE key token result`, a duplicate's `LOCK.ONCE` (the replay),
//! against the Powertools-style recipe `SET key INPROGRESS NX PX ttl`, `SET key result XX
//! PX ttl`, `GET key`. A random key an earlier cycle left (kept, or running) is a retry.
//!
//! The four-key cycles (`LOCK.ACQUIREALL`'s scenario, `acquireall`) take four keys of
//! the connection's own under its client token and give them back: `LOCK.ACQUIREALL 4
//! k1 k2 k3 k4 ttl TOKEN t`, or four `LOCK.ACQUIRE ki ttl TOKEN t` sent in one write;
//! then four `LOCK.RELEASE ki t` in one write, for both. Each connection visits
//! `HELD_PER_CONN` sets of four keys in turn, far more than it has in flight, so no
//! two cycles ever ask for the same key.

use testkit::resp::{encode, Reply};

use crate::measure::lua::{data_key, fence_key, leader_value, lock_key, mark_key, Name, Scripts};
use crate::measure::operation::{client_token, HeldTokens, Keys, Op, Outcome, CONN_STRIDE};

/// Lease given by timed acquires (long enough never to expire during a run).
pub const TTL: &[u8] = b"30000";
/// Lease of keys set up for release/refresh/fence runs, and what refresh asks for.
pub const LONG_TTL: &[u8] = b"600000";
/// The fence every fenced write carries: equal fences are admitted, so each write
/// passes the check, as one holder's successive writes do.
pub const FENCE: &[u8] = b"7";
/// Keys each connection refreshes or reads in turn.
pub const HELD_PER_CONN: u64 = 1_000;
/// Keyspace the cycles' random keys come from: large enough that two cycles in flight
/// rarely pick the same key (a collision is counted as busy and retried).
pub const KEYSPACE: u64 = 10_000_000;
/// The result a run-once replay and a cached-result `GET` return: a small JSON answer,
/// as an API's response body would be.
pub const RESULT: &[u8] = br#"{"order":17,"status":"paid","amount":4200}"#;
/// Keys each four-key cycle takes.
pub const CYCLE_KEYS: u64 = 4;
/// `CYCLE_KEYS` as `LOCK.ACQUIREALL`'s numkeys.
const CYCLE_NUMKEYS: &[u8] = b"4";
/// Semaphores the semaphore cycles share: with 50 connections × 32 commands in flight,
/// each semaphore has several holders at a time in a pipelined run (unpipelined, rarely
/// more than one).
pub const SEMAPHORES: u64 = 100;
/// Permits per semaphore: more than a semaphore ever has holders in these runs, so an
/// acquire is refused only by chance (counted as busy and retried).
pub const SEMAPHORE_LIMIT: &[u8] = b"64";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `LOCK.ACQUIRE key ttl` on a fresh key (server-generated token).
    LockAcquire,
    /// `FLOOR.ACQUIRE key ttl` on a fresh key: the floor module's grant.
    FloorAcquire,
    /// `SET key token NX PX ttl` on a fresh key.
    SetNxPx,
    /// `SET key token NX PX ttl`, then on success `INCR fence:key`: the fenced grant.
    SetNxPxIncr,
    /// `LOCK.RELEASE key token` on a key the token holds.
    LockRelease,
    /// `FLOOR.RELEASE key token` on a key the floor granted to that token.
    FloorRelease,
    /// `EVALSHA release 1 key token` on a key the token holds.
    LuaRelease,
    /// `DELIFEQ key token` on a key the token holds (Valkey 9).
    DelIfEq,
    /// `DELEX key IFEQ token` on a key the token holds (Redis 8.4+).
    DelexIfEq,
    /// `LOCK.REFRESH key token ttl` on a key the token holds.
    LockRefresh,
    /// `FLOOR.REFRESH key token ttl` on a key the floor granted to that token.
    FloorRefresh,
    /// `EVALSHA refresh 1 key token ttl` on a key the token holds.
    LuaRefresh,
    /// `SET key token IFEQ token PX ttl` on a key the token holds (Valkey 9, Redis 8.4+).
    SetIfEq,
    /// `LOCK.FENCE key` on a held key.
    LockFence,
    /// `GET key` on a held key.
    Get,
    /// `LOCK.ONCE key ttl KEEP keep` on a key whose run is done: a duplicate answered
    /// `[nil, fence, result]` (run once's replay).
    OnceReplay,
    /// `GET key` on a key holding a result as long as the replayed one: the cached
    /// result a hand-rolled idempotency record reads.
    GetResult,
    /// Run once's whole cycle on a random key: `LOCK.ONCE key ttl KEEP ttl` (the run),
    /// `LOCK.DONE key token result`, then a duplicate's `LOCK.ONCE` (the replay).
    OnceCycle,
    /// The Powertools-style recipe's cycle: `SET key INPROGRESS NX PX ttl`, `SET key
    /// result XX PX ttl`, then a duplicate's `GET key`.
    SetNxSetGetCycle,
    /// fencelock's lock cycle: `LOCK.ACQUIRE`, `LOCK.RELEASE` with the granted token.
    FencelockCycle,
    /// The Lua pattern's cycle: `SET NX PX`, `INCR fence:key`, `EVALSHA` release.
    LuaCycle,
    /// The native pattern's cycle: `SET NX PX`, `INCR fence:key`, `DELIFEQ`.
    NativeCycle,
    /// fencelock's semaphore cycle: `LOCK.ACQUIRE key ttl LIMIT n`, `LOCK.RELEASE`.
    SemaphoreCycle,
    /// The ZSET semaphore's cycle: `EVALSHA semaphore 1 key token now ttl n`, `ZREM`.
    LuaSemaphoreCycle,
    /// `LOCK.GUARD key token SET key:data v` on a key the token holds.
    LockGuard,
    /// `EVALSHA guard 2 key key:data token v` on a key the token holds.
    LuaGuard,
    /// `LOCK.FENCED mark:key fence SET key:data v`, the same fence each time (admitted).
    LockFenced,
    /// `EVALSHA mark-check 2 mark:key key:data fence v`, the same fence each time.
    LuaFenced,
    /// `LOCK.ACQUIREALL 4 k1..k4 ttl TOKEN t`, then four `LOCK.RELEASE ki t` in one
    /// write.
    AcquireAllCycle,
    /// Four `LOCK.ACQUIRE ki ttl TOKEN t` in one write, then four `LOCK.RELEASE ki t`
    /// in one write: what a client does for four keys without `LOCK.ACQUIREALL`.
    PipelinedAcquireCycle,
    /// `LOCK.ACQUIRE key ttl VALUE v` on a fresh key.
    LockAcquireValue,
    /// `LOCK.PROCLAIM key token v` on a key the token holds, a new value each time.
    LockProclaim,
    /// `EVALSHA proclaim 1 key old new` on a key whose value is `old`: the hand-rolled
    /// `SET key new XX KEEPTTL` behind an owner check.
    LuaProclaim,
    /// `PING`: what any command costs the server before it does anything (profile only).
    Ping,
    /// `INCR fence:key` on fresh keys: the fence counter on its own (profile only).
    Incr,
    /// Set-up: `LOCK.ACQUIRE key ttl TOKEN token`.
    HoldWithFencelock,
    /// Set-up: `SET key token PX ttl`.
    HoldWithSet,
    /// Set-up: `LOCK.RECORD key DONE 1 result KEEP keep`, a done run-once record.
    DoneWithRecord,
    /// Set-up: `SET key result PX keep`, a cached result.
    ResultWithSet,
    /// Set-up: `FLOOR.ACQUIRE key ttl`, each granted token kept (`records_tokens`).
    HoldWithFloor,
}

/// Untimed keys a variant needs before its run.
#[derive(Clone, Copy)]
pub enum Setup {
    /// Hold exactly the keys the timed run will visit (each released once).
    SameKeys(Command),
    /// Hold `HELD_PER_CONN` keys per connection (visited in turn).
    Held(Command),
}

impl Command {
    pub fn keys(self) -> Keys {
        match self {
            Command::LockRefresh
            | Command::FloorRefresh
            | Command::LuaRefresh
            | Command::SetIfEq
            | Command::LockFence
            | Command::Get
            | Command::OnceReplay
            | Command::GetResult
            | Command::LockGuard
            | Command::LuaGuard
            | Command::LockFenced
            | Command::LuaFenced
            | Command::LockProclaim
            | Command::LuaProclaim
            | Command::AcquireAllCycle
            | Command::PipelinedAcquireCycle => Keys::Cycle(HELD_PER_CONN),
            Command::FencelockCycle
            | Command::LuaCycle
            | Command::NativeCycle
            | Command::OnceCycle
            | Command::SetNxSetGetCycle => Keys::Random(KEYSPACE),
            Command::SemaphoreCycle | Command::LuaSemaphoreCycle => Keys::Random(SEMAPHORES),
            _ => Keys::Fresh,
        }
    }

    pub fn setup(self) -> Option<Setup> {
        match self {
            Command::LockRelease => Some(Setup::SameKeys(Command::HoldWithFencelock)),
            Command::FloorRelease => Some(Setup::SameKeys(Command::HoldWithFloor)),
            Command::FloorRefresh => Some(Setup::Held(Command::HoldWithFloor)),
            Command::LuaRelease | Command::DelIfEq | Command::DelexIfEq => {
                Some(Setup::SameKeys(Command::HoldWithSet))
            }
            Command::LockRefresh
            | Command::LockFence
            | Command::LockGuard
            | Command::LockProclaim => Some(Setup::Held(Command::HoldWithFencelock)),
            Command::LuaRefresh
            | Command::SetIfEq
            | Command::Get
            | Command::LuaGuard
            | Command::LuaProclaim => Some(Setup::Held(Command::HoldWithSet)),
            Command::OnceReplay => Some(Setup::Held(Command::DoneWithRecord)),
            Command::GetResult => Some(Setup::Held(Command::ResultWithSet)),
            _ => None,
        }
    }

    /// Whether a run keeps the tokens it is granted, for the timed run after it (the
    /// floor's set-up: its release and refresh need the server's tokens).
    pub fn records_tokens(self) -> bool {
        matches!(self, Command::HoldWithFloor)
    }

    pub fn commands_per_op(self) -> u64 {
        match self {
            Command::SetNxPxIncr
            | Command::FencelockCycle
            | Command::SemaphoreCycle
            | Command::LuaSemaphoreCycle => 2,
            Command::LuaCycle
            | Command::NativeCycle
            | Command::OnceCycle
            | Command::SetNxSetGetCycle => 3,
            Command::AcquireAllCycle => 1 + CYCLE_KEYS,
            Command::PipelinedAcquireCycle => 2 * CYCLE_KEYS,
            _ => 1,
        }
    }

    /// Steps of one operation, each waiting for the replies to the one before.
    pub fn steps(self) -> u64 {
        match self {
            Command::AcquireAllCycle | Command::PipelinedAcquireCycle => 2,
            _ => self.commands_per_op(),
        }
    }

    /// Commands sent in one write at step `step`.
    pub fn width(self, step: u8) -> usize {
        match (self, step) {
            (Command::AcquireAllCycle, 0) => 1,
            (Command::AcquireAllCycle | Command::PipelinedAcquireCycle, _) => CYCLE_KEYS as usize,
            _ => 1,
        }
    }
}

/// `[nil, fence, result]` with the benchmark's result: a run-once replay.
fn is_replay(reply: &Reply) -> bool {
    match reply {
        Reply::Array(Some(items)) => matches!(items.as_slice(),
            [Reply::Bulk(None), fence, Reply::Bulk(Some(result))]
                if fence.integer().is_some_and(|fence| fence > 0) && result.as_slice() == RESULT),
        _ => false,
    }
}

/// The connection an operation on its own keys (`Keys::Fresh`, `Keys::Cycle`) runs on.
fn op_conn(op: &Op) -> usize {
    usize::try_from(op.key / CONN_STRIDE).unwrap_or(usize::MAX)
}

/// Key `j` (0..`CYCLE_KEYS`) of the four-key set numbered `set`.
fn cycle_key(set: u64, j: u64) -> Name {
    lock_key(set * CYCLE_KEYS + j)
}

/// A `Command` with the script SHA1s its `EVALSHA`s need, and the tokens its set-up
/// was granted (where the server chose them; else empty).
#[derive(Clone)]
pub struct Recipe {
    pub command: Command,
    pub scripts: Scripts,
    pub held: HeldTokens,
}

impl Recipe {
    pub fn new(command: Command, scripts: &Scripts) -> Self {
        Self {
            command,
            scripts: scripts.clone(),
            held: HeldTokens::default(),
        }
    }
}

/// The ZSET semaphore's token for operation `id` of connection `conn`: the
/// connection's token and the operation's number, so that no two holders share one.
fn holder_token(conn: usize, id: u64) -> Name {
    Name::new(&client_token(conn), id)
}

/// Which visit of its key operation `id` is (`Keys::Cycle(HELD_PER_CONN)`: an
/// operation's number is its place in the connection's sequence).
fn visit(id: u64) -> u64 {
    id / HELD_PER_CONN
}

fn unexpected(what: &str, reply: &Reply) -> Outcome {
    Outcome::Unexpected(format!("{what}: expected a hit, got {reply:?}"))
}

impl Recipe {
    /// Appends the command for `op`'s current step; `conn`'s client-chosen token.
    pub fn command(&self, conn: usize, op: &Op, out: &mut Vec<u8>) {
        let key = lock_key(op.key);
        let key = key.as_bytes();
        let token = client_token(conn);
        let token = &token[..];
        let (release, refresh) = (&self.scripts.release[..], &self.scripts.refresh[..]);
        match (self.command, op.step) {
            (Command::LockAcquire | Command::FencelockCycle, 0) => {
                encode(out, &[b"LOCK.ACQUIRE", key, TTL])
            }
            (Command::FloorAcquire, _) => encode(out, &[b"FLOOR.ACQUIRE", key, TTL]),
            (Command::FloorRelease, _) => {
                encode(out, &[b"FLOOR.RELEASE", key, self.held.token(conn, op.key)])
            }
            (Command::FloorRefresh, _) => encode(
                out,
                &[
                    b"FLOOR.REFRESH",
                    key,
                    self.held.token(conn, op.key),
                    LONG_TTL,
                ],
            ),
            (Command::HoldWithFloor, _) => encode(out, &[b"FLOOR.ACQUIRE", key, LONG_TTL]),
            (Command::SemaphoreCycle, 0) => {
                encode(out, &[b"LOCK.ACQUIRE", key, TTL, b"LIMIT", SEMAPHORE_LIMIT])
            }
            (Command::FencelockCycle | Command::SemaphoreCycle, _) => {
                encode(out, &[b"LOCK.RELEASE", key, &op.token])
            }
            (Command::LuaSemaphoreCycle, 0) => self.scripts.semaphore_acquire(
                key,
                holder_token(conn, op.id).as_bytes(),
                TTL,
                SEMAPHORE_LIMIT,
                |argv| encode(out, argv),
            ),
            (Command::LuaSemaphoreCycle, _) => {
                encode(out, &[b"ZREM", key, holder_token(conn, op.id).as_bytes()])
            }
            (
                Command::SetNxPx | Command::SetNxPxIncr | Command::LuaCycle | Command::NativeCycle,
                0,
            ) => encode(out, &[b"SET", key, token, b"NX", b"PX", TTL]),
            (Command::SetNxPxIncr | Command::LuaCycle | Command::NativeCycle, 1)
            | (Command::Incr, _) => encode(out, &[b"INCR", fence_key(op.key).as_bytes()]),
            (Command::LuaRelease | Command::LuaCycle, _) => {
                encode(out, &[b"EVALSHA", release, b"1", key, token])
            }
            (Command::DelIfEq | Command::NativeCycle, _) => encode(out, &[b"DELIFEQ", key, token]),
            (Command::DelexIfEq, _) => encode(out, &[b"DELEX", key, b"IFEQ", token]),
            (Command::SetIfEq, _) => {
                encode(out, &[b"SET", key, token, b"IFEQ", token, b"PX", LONG_TTL])
            }
            (Command::AcquireAllCycle, 0) => {
                let keys: Vec<Name> = (0..CYCLE_KEYS).map(|j| cycle_key(op.key, j)).collect();
                let mut argv: Vec<&[u8]> = vec![b"LOCK.ACQUIREALL", CYCLE_NUMKEYS];
                argv.extend(keys.iter().map(Name::as_bytes));
                argv.extend([TTL, b"TOKEN", token]);
                encode(out, &argv)
            }
            (Command::PipelinedAcquireCycle, 0) => {
                for j in 0..CYCLE_KEYS {
                    let key = cycle_key(op.key, j);
                    encode(
                        out,
                        &[b"LOCK.ACQUIRE", key.as_bytes(), TTL, b"TOKEN", token],
                    );
                }
            }
            (Command::AcquireAllCycle | Command::PipelinedAcquireCycle, _) => {
                for j in 0..CYCLE_KEYS {
                    encode(
                        out,
                        &[b"LOCK.RELEASE", cycle_key(op.key, j).as_bytes(), token],
                    );
                }
            }
            (Command::LockAcquireValue, _) => encode(
                out,
                &[
                    b"LOCK.ACQUIRE",
                    key,
                    TTL,
                    b"VALUE",
                    leader_value(op.id).as_bytes(),
                ],
            ),
            (Command::LockProclaim, _) => encode(
                out,
                &[
                    b"LOCK.PROCLAIM",
                    key,
                    token,
                    leader_value(visit(op.id)).as_bytes(),
                ],
            ),
            (Command::LuaProclaim, _) => {
                // The value the visit before wrote; the set-up's (the token) first.
                let previous = visit(op.id).checked_sub(1).map(leader_value);
                let old = previous.as_ref().map_or(token, Name::as_bytes);
                encode(
                    out,
                    &[
                        b"EVALSHA",
                        &self.scripts.proclaim,
                        b"1",
                        key,
                        old,
                        leader_value(visit(op.id)).as_bytes(),
                    ],
                )
            }
            (Command::Ping, _) => encode(out, &[b"PING"]),
            (Command::LockRelease, _) => encode(out, &[b"LOCK.RELEASE", key, token]),
            (Command::LockRefresh, _) => encode(out, &[b"LOCK.REFRESH", key, token, LONG_TTL]),
            (Command::LuaRefresh, _) => {
                encode(out, &[b"EVALSHA", refresh, b"1", key, token, LONG_TTL])
            }
            (Command::LockFence, _) => encode(out, &[b"LOCK.FENCE", key]),
            (Command::LockGuard, _) => encode(
                out,
                &[
                    b"LOCK.GUARD",
                    key,
                    token,
                    b"SET",
                    data_key(op.key).as_bytes(),
                    b"v",
                ],
            ),
            (Command::LuaGuard, _) => encode(
                out,
                &[
                    b"EVALSHA",
                    &self.scripts.guard,
                    b"2",
                    key,
                    data_key(op.key).as_bytes(),
                    token,
                    b"v",
                ],
            ),
            (Command::LockFenced, _) => encode(
                out,
                &[
                    b"LOCK.FENCED",
                    mark_key(op.key).as_bytes(),
                    FENCE,
                    b"SET",
                    data_key(op.key).as_bytes(),
                    b"v",
                ],
            ),
            (Command::LuaFenced, _) => encode(
                out,
                &[
                    b"EVALSHA",
                    &self.scripts.mark_check,
                    b"2",
                    mark_key(op.key).as_bytes(),
                    data_key(op.key).as_bytes(),
                    FENCE,
                    b"v",
                ],
            ),
            (Command::Get | Command::GetResult, _) => encode(out, &[b"GET", key]),
            (Command::OnceReplay, _) => encode(out, &[b"LOCK.ONCE", key, TTL, b"KEEP", LONG_TTL]),
            (Command::OnceCycle, 1) => encode(out, &[b"LOCK.DONE", key, &op.token, RESULT]),
            (Command::OnceCycle, _) => encode(out, &[b"LOCK.ONCE", key, TTL, b"KEEP", TTL]),
            (Command::SetNxSetGetCycle, 0) => {
                encode(out, &[b"SET", key, b"INPROGRESS", b"NX", b"PX", TTL])
            }
            (Command::SetNxSetGetCycle, 1) => {
                encode(out, &[b"SET", key, RESULT, b"XX", b"PX", TTL])
            }
            (Command::SetNxSetGetCycle, _) => encode(out, &[b"GET", key]),
            (Command::DoneWithRecord, _) => encode(
                out,
                &[
                    b"LOCK.RECORD",
                    key,
                    b"DONE",
                    b"1",
                    RESULT,
                    b"KEEP",
                    LONG_TTL,
                ],
            ),
            (Command::ResultWithSet, _) => encode(out, &[b"SET", key, RESULT, b"PX", LONG_TTL]),
            (Command::HoldWithFencelock, _) => {
                encode(out, &[b"LOCK.ACQUIRE", key, LONG_TTL, b"TOKEN", token])
            }
            (Command::HoldWithSet, _) => encode(out, &[b"SET", key, token, b"PX", LONG_TTL]),
            (Command::LockAcquire | Command::SetNxPx | Command::SetNxPxIncr, _) => {
                unreachable!("{:?} has no step {}", self.command, op.step)
            }
        }
    }

    /// Interprets the reply to `op`'s current step (and records a granted token in it).
    pub fn reply(&self, op: &mut Op, reply: Reply) -> Outcome {
        let last = u64::from(op.step) + 1 == self.command.steps();
        let hit = match (self.command, op.step) {
            // `[token, [fence, …]]`: the connection's token and a fence for every key.
            (Command::AcquireAllCycle, 0) => match &reply {
                Reply::Array(Some(items)) => match items.as_slice() {
                    [Reply::Bulk(Some(token)), Reply::Array(Some(fences))] => {
                        token.as_slice() == client_token(op_conn(op)).as_slice()
                            && fences.len() as u64 == CYCLE_KEYS
                            && fences.iter().all(|f| f.integer().is_some_and(|f| f > 0))
                    }
                    _ => false,
                },
                _ => false,
            },
            (Command::PipelinedAcquireCycle, 0) => reply
                .grant()
                .is_some_and(|(token, _)| token == client_token(op_conn(op)).as_slice()),
            // Random keys can collide with a cycle in flight: not a miss, a retry.
            (
                Command::FencelockCycle
                | Command::LuaCycle
                | Command::NativeCycle
                | Command::SemaphoreCycle,
                0,
            ) if reply.is_nil() => return Outcome::Busy,
            // A random key whose earlier cycle's result is still kept: a retry.
            (Command::OnceCycle | Command::SetNxSetGetCycle, 0)
                if reply.is_nil()
                    || matches!(&reply, Reply::Array(Some(items)) if items.len() == 3) =>
            {
                return Outcome::Busy
            }
            (Command::OnceCycle, 0) => match reply.grant() {
                Some((token, _fence)) => {
                    op.token = token.to_vec();
                    true
                }
                None => false,
            },
            (Command::OnceCycle, 2) => is_replay(&reply),
            (Command::SetNxSetGetCycle, 2) => reply.bulk() == Some(RESULT),
            (Command::SetNxSetGetCycle, _) => reply.is_ok(),
            // The semaphore script answers 0 when every permit is taken.
            (Command::LuaSemaphoreCycle, 0) if reply.integer() == Some(0) => return Outcome::Busy,
            (Command::FencelockCycle | Command::SemaphoreCycle | Command::HoldWithFloor, 0) => {
                match reply.grant() {
                    Some((token, _fence)) => {
                        op.token = token.to_vec();
                        true
                    }
                    None => false,
                }
            }
            (
                Command::LockAcquire
                | Command::LockAcquireValue
                | Command::FloorAcquire
                | Command::HoldWithFencelock,
                _,
            ) => reply.grant().is_some(),
            (Command::SetNxPx | Command::HoldWithSet, _) => reply.is_ok(),
            (Command::SetNxPxIncr | Command::LuaCycle | Command::NativeCycle, 0)
            | (Command::SetIfEq, _) => reply.is_ok(),
            (Command::SetNxPxIncr | Command::LuaCycle | Command::NativeCycle, 1)
            | (Command::Incr, _) => reply.integer().is_some(),
            (Command::Ping, _) => matches!(&reply, Reply::Status(s) if s == "PONG"),
            (Command::LockFence, _) => reply.integer().is_some_and(|fence| fence > 0),
            (Command::Get, _) => reply.bulk().is_some(),
            (Command::GetResult, _) => reply.bulk() == Some(RESULT),
            (Command::OnceReplay, _) => is_replay(&reply),
            (Command::DoneWithRecord | Command::ResultWithSet, _) => reply.is_ok(),
            // Guarded and fenced writes answer the inner SET's OK.
            (
                Command::LockGuard | Command::LuaGuard | Command::LockFenced | Command::LuaFenced,
                _,
            ) => reply.is_ok(),
            // Releases and refreshes, fencelock's, the floor's, the scripts' and the
            // native ones, answer 1 on a hit; so do the semaphore script's grant and `ZREM`.
            _ => reply.integer() == Some(1),
        };
        match (hit, last) {
            (true, true) => Outcome::Done,
            (true, false) => Outcome::Next,
            (false, _) => unexpected(&format!("{:?} step {}", self.command, op.step), &reply),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::resp::parse;

    fn argv(recipe: &Recipe, id: u64) -> Vec<Vec<u8>> {
        let op = Op {
            id,
            key: id % HELD_PER_CONN,
            step: 0,
            part: 0,
            token: Vec::new(),
        };
        let mut out = Vec::new();
        recipe.command(0, &op, &mut out);
        match parse(&out).unwrap() {
            Some((Reply::Array(Some(items)), _)) => items
                .into_iter()
                .map(|item| item.bulk().unwrap().to_vec())
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    /// Each visit of a key proclaims a value of its own; the script's owner check
    /// compares the value the visit before wrote (the set-up's token on the first).
    #[test]
    fn every_proclaim_changes_the_value_and_checks_the_one_before() {
        let scripts = Scripts {
            release: b"r".to_vec(),
            refresh: b"f".to_vec(),
            guard: b"g".to_vec(),
            mark_check: b"m".to_vec(),
            semaphore: b"s".to_vec(),
            proclaim: b"p".to_vec(),
        };
        let lua = Recipe::new(Command::LuaProclaim, &scripts);
        let first = argv(&lua, 7);
        assert_eq!(first[4], client_token(0));
        assert_eq!(first[5], leader_value(0).as_bytes());
        let second = argv(&lua, HELD_PER_CONN + 7);
        assert_eq!(second[3], first[3], "the same key, visited again");
        assert_eq!(second[4], leader_value(0).as_bytes());
        assert_eq!(second[5], leader_value(1).as_bytes());
        let ours = Recipe::new(Command::LockProclaim, &scripts);
        let proclaim = argv(&ours, HELD_PER_CONN + 7);
        assert_eq!(proclaim[0], b"LOCK.PROCLAIM");
        assert_eq!(proclaim[2], client_token(0));
        assert_eq!(proclaim[3], leader_value(1).as_bytes());
    }
}
