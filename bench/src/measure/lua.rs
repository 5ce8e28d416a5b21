//! The Lua-and-polling pattern fencelock replaces: the owner-checked release and
//! refresh scripts every Redis lock library ships, the ZSET semaphore script, loaded
//! once per server, and the key names the pattern uses (the lock key and its `fence:`
//! counter).

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use testkit::resp::Conn;

use crate::measure::server::load_script;

/// `if GET == token then DEL`: the safe release.
pub const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// `if GET == token then PEXPIRE`: the safe refresh.
pub const REFRESH: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// `if GET lock == token then SET key value`: the guarded write `LOCK.GUARD` replaces.
pub const GUARD: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('set', KEYS[2], ARGV[2]) else return 0 end";

/// Kleppmann's storage check by hand: the mark's highest fence, compare, raise, write.
pub const MARK_CHECK: &str = "local m = tonumber(redis.call('get', KEYS[1]) or '0') if tonumber(ARGV[1]) < m then return redis.error_reply('STALE') end redis.call('set', KEYS[1], ARGV[1]) return redis.call('set', KEYS[2], ARGV[2])";

/// The "fair semaphore" on a sorted set, as the ZSET recipes write it: one member per
/// holder, scored by the end of its lease. Drop the holders whose lease ended, add
/// this one, keep it if it ranks below the limit, else take it out again. `KEYS[1]`
/// the semaphore, `ARGV` token, now (ms, the client's clock), lease (ms), limit; 1 or
/// 0. The release is a plain `ZREM key token`.
pub const SEMAPHORE: &str = "local now = tonumber(ARGV[2]) redis.call('zremrangebyscore', KEYS[1], '-inf', now) redis.call('zadd', KEYS[1], now + tonumber(ARGV[3]), ARGV[1]) if redis.call('zrank', KEYS[1], ARGV[1]) < tonumber(ARGV[4]) then return 1 end redis.call('zrem', KEYS[1], ARGV[1]) return 0";

/// The hand-rolled leader key's change of value (what `LOCK.PROCLAIM` replaces): the key
/// holds the leader's value, which is also what the owner checks (the leader knows the
/// value it last wrote); `if GET == old then SET new XX KEEPTTL` (lease kept), 1 or 0.
pub const PROCLAIM: &str = "if redis.call('get', KEYS[1]) == ARGV[1] and redis.call('set', KEYS[1], ARGV[2], 'XX', 'KEEPTTL') then return 1 end return 0";

/// The SHA1s `EVALSHA` calls the scripts by.
#[derive(Clone, Debug)]
pub struct Scripts {
    pub release: Vec<u8>,
    pub refresh: Vec<u8>,
    pub guard: Vec<u8>,
    pub mark_check: Vec<u8>,
    pub semaphore: Vec<u8>,
    pub proclaim: Vec<u8>,
}

impl Scripts {
    /// Loads every script (idempotent; `FLUSHALL` does not drop them).
    pub fn load(conn: &mut Conn) -> io::Result<Self> {
        Ok(Self {
            release: load_script(conn, RELEASE)?,
            refresh: load_script(conn, REFRESH)?,
            guard: load_script(conn, GUARD)?,
            mark_check: load_script(conn, MARK_CHECK)?,
            semaphore: load_script(conn, SEMAPHORE)?,
            proclaim: load_script(conn, PROCLAIM)?,
        })
    }

    /// Hands `send` the argv of one ZSET-semaphore acquire of `key` by `token`, with
    /// a lease of `ttl` ms and at most `limit` holders, stamped with the time now.
    pub fn semaphore_acquire<R>(
        &self,
        key: &[u8],
        token: &[u8],
        ttl: &[u8],
        limit: &[u8],
        send: impl FnOnce(&[&[u8]]) -> R,
    ) -> R {
        let now = Name::new(b"", now_ms());
        send(&[
            b"EVALSHA",
            &self.semaphore,
            b"1",
            key,
            token,
            now.as_bytes(),
            ttl,
            limit,
        ])
    }
}

/// The client's wall clock in ms since the Unix epoch, as the ZSET recipe scores by.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A key name built on the stack: `prefix` then the decimal digits of a number.
pub struct Name {
    bytes: [u8; 64],
    len: usize,
}

impl Name {
    pub fn new(prefix: &[u8], n: u64) -> Self {
        let mut name = Self {
            bytes: [0; 64],
            len: 0,
        };
        let take = prefix.len().min(40);
        name.bytes[..take].copy_from_slice(&prefix[..take]);
        name.len = take;
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let tail = &digits[at..];
        name.bytes[name.len..name.len + tail.len()].copy_from_slice(tail);
        name.len += tail.len();
        name
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The lock key of key number `n` (the same name for both patterns).
pub fn lock_key(n: u64) -> Name {
    Name::new(b"lock:", n)
}

/// The Lua pattern's fence counter for key number `n`, kept forever.
pub fn fence_key(n: u64) -> Name {
    Name::new(b"fence:lock:", n)
}

/// A leader's public value number `n` (`LOCK.ACQUIRE … VALUE`, `LOCK.PROCLAIM`, the
/// hand-rolled leader key's value): an address and an epoch, 21 bytes and more.
pub fn leader_value(n: u64) -> Name {
    Name::new(b"10.0.0.1:6379/epoch-", n)
}

/// The data a guarded or fenced write of key number `n` sets.
pub fn data_key(n: u64) -> Name {
    Name::new(b"data:", n)
}

/// The fence mark guarding the data of key number `n`.
pub fn mark_key(n: u64) -> Name {
    Name::new(b"mark:", n)
}
