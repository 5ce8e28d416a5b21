//! The held-locks curve's state: `n` locks on keys of their own, each with the token
//! the server generated for it (kept here, 32 characters each); and its operations,
//! each leaving `n` locks held. Held keys are visited spread over all `n`, as a real
//! workload touches them, so that the largest size pays the cache misses of a large
//! keyspace — the `PTTL` curve shows how much of that is Redis's own lookup.

use std::io;

use testkit::resp::{encode, push_decimal, Conn};

use crate::measure::curves::{pipelined, spread, token, Expect, LEASE};
use crate::results::curves::Op;

const HELD: &[u8] = b"curve:lock:";
const FRESH: &[u8] = b"curve:fresh:";
const FRESH_TOKEN: &[u8; 8] = b"fresh---";

fn key(prefix: &[u8], i: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 20);
    key.extend_from_slice(prefix);
    push_decimal(&mut key, i);
    key
}

pub struct Locks {
    /// The token of each held key, by its number.
    tokens: Vec<Vec<u8>>,
}

impl Locks {
    /// `n` locks, acquired pipelined on `conn`.
    pub fn build(conn: &mut Conn, n: u64) -> io::Result<Self> {
        let mut tokens = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        // Not `pipelined`: each grant's token is kept, and the grants come in order.
        let mut out = Vec::new();
        let batch = 1_000;
        let mut next = 0;
        while next < n {
            let end = (next + batch).min(n);
            out.clear();
            for i in next..end {
                encode(&mut out, &[b"LOCK.ACQUIRE", &key(HELD, i), LEASE]);
            }
            conn.send(&out)?;
            for _ in next..end {
                let reply = conn.read_reply()?;
                let (token, _) = reply
                    .grant()
                    .ok_or_else(|| io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}")))?;
                tokens.push(token.to_vec());
            }
            next = end;
        }
        Ok(Self { tokens })
    }

    pub fn run(&self, conn: &mut Conn, op: Op, rep: usize, ops: u64) -> io::Result<()> {
        let n = self.tokens.len() as u64;
        let held = |i| {
            let j = spread(i, n);
            (key(HELD, j), &self.tokens[j as usize])
        };
        pipelined(conn, ops, |i, out, expect| match op {
            Op::FreshCycle => {
                let number = rep as u64 * ops + i;
                let (key, token) = (key(FRESH, number), token(FRESH_TOKEN, number));
                encode(
                    out,
                    &[b"LOCK.ACQUIRE", &key, LEASE, b"TOKEN", token.as_slice()],
                );
                encode(out, &[b"LOCK.RELEASE", &key, &token]);
                expect.extend([Expect::Grant, Expect::One]);
            }
            Op::ReacquireLock => {
                let (key, token) = held(i);
                encode(out, &[b"LOCK.RELEASE", &key, token]);
                encode(out, &[b"LOCK.ACQUIRE", &key, LEASE, b"TOKEN", token]);
                expect.extend([Expect::One, Expect::Grant]);
            }
            Op::RefreshLock => {
                let (key, token) = held(i);
                encode(out, &[b"LOCK.REFRESH", &key, token, LEASE]);
                expect.push(Expect::One);
            }
            Op::InfoLock => {
                encode(out, &[b"LOCK.INFO", &held(i).0]);
                expect.push(Expect::Fields);
            }
            Op::PttlLock => {
                encode(out, &[b"PTTL", &held(i).0]);
                expect.push(Expect::Positive);
            }
            _ => unreachable!("{op:?} is not a held-locks operation"),
        })
    }
}
