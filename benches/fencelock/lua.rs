//! The Lua-and-polling pattern fencelock replaces: the owner-checked release and
//! refresh scripts every Redis lock library ships, loaded once per server, and the
//! key names the pattern uses (the lock key and its `fence:` counter).

use std::io;

use testkit::resp::Conn;

use crate::server::load_script;

/// `if GET == token then DEL`: the safe release.
pub const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// `if GET == token then PEXPIRE`: the safe refresh.
pub const REFRESH: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// `if GET lock == token then SET key value`: the guarded write `LOCK.GUARD` replaces.
pub const GUARD: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('set', KEYS[2], ARGV[2]) else return 0 end";

/// Kleppmann's storage check by hand: the mark's highest fence, compare, raise, write.
pub const MARK_CHECK: &str = "local m = tonumber(redis.call('get', KEYS[1]) or '0') if tonumber(ARGV[1]) < m then return redis.error_reply('STALE') end redis.call('set', KEYS[1], ARGV[1]) return redis.call('set', KEYS[2], ARGV[2])";

/// The SHA1s `EVALSHA` calls the scripts by.
#[derive(Clone, Debug)]
pub struct Scripts {
    pub release: Vec<u8>,
    pub refresh: Vec<u8>,
    pub guard: Vec<u8>,
    pub mark_check: Vec<u8>,
}

impl Scripts {
    /// Loads both scripts (idempotent; `FLUSHALL` does not drop them).
    pub fn load(conn: &mut Conn) -> io::Result<Self> {
        Ok(Self {
            release: load_script(conn, RELEASE)?,
            refresh: load_script(conn, REFRESH)?,
            guard: load_script(conn, GUARD)?,
            mark_check: load_script(conn, MARK_CHECK)?,
        })
    }
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

/// The data a guarded or fenced write of key number `n` sets.
pub fn data_key(n: u64) -> Name {
    Name::new(b"data:", n)
}

/// The fence mark guarding the data of key number `n`.
pub fn mark_key(n: u64) -> Name {
    Name::new(b"mark:", n)
}
