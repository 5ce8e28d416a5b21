//! The holders curve's state: one semaphore with `n` holders (chosen tokens, a lease
//! that outlasts the run), its `LIMIT` well above every size so that a new permit is
//! always granted; and its operations, each leaving the semaphore at `n` holders.

use std::io;

use testkit::resp::{encode, Conn};

use crate::measure::curves::{pipelined, spread, token, Expect, LEASE};
use crate::results::curves::Op;

const KEY: &[u8] = b"curve:semaphore";
const HOLDER: &[u8; 8] = b"holder--";
const PERMIT: &[u8; 8] = b"permit--";

pub struct Holders {
    n: u64,
    /// `LIMIT`, as text: the same on every acquire (the mode belongs to the key).
    limit: Vec<u8>,
}

fn acquire(out: &mut Vec<u8>, limit: &[u8], token: &[u8]) {
    encode(
        out,
        &[
            b"LOCK.ACQUIRE",
            KEY,
            LEASE,
            b"LIMIT",
            limit,
            b"TOKEN",
            token,
        ],
    );
}

impl Holders {
    /// `n` holders, pipelined on `conn`.
    pub fn build(conn: &mut Conn, n: u64, limit: u64) -> io::Result<Self> {
        let limit = limit.to_string().into_bytes();
        pipelined(conn, n, |i, out, expect| {
            acquire(out, &limit, &token(HOLDER, i));
            expect.push(Expect::Grant);
        })?;
        Ok(Self { n, limit })
    }

    /// `ops` operations of kind `op` (repetition `rep`: new permits get tokens never
    /// used before in the run).
    pub fn run(&self, conn: &mut Conn, op: Op, rep: usize, ops: u64) -> io::Result<()> {
        let (n, limit) = (self.n, self.limit.as_slice());
        pipelined(conn, ops, |i, out, expect| match op {
            Op::NewPermit => {
                let permit = token(PERMIT, rep as u64 * ops + i);
                acquire(out, limit, &permit);
                encode(out, &[b"LOCK.RELEASE", KEY, &permit]);
                expect.extend([Expect::Grant, Expect::One]);
            }
            Op::RefreshHolder => {
                let holder = token(HOLDER, spread(i, n));
                encode(out, &[b"LOCK.REFRESH", KEY, &holder, LEASE]);
                expect.push(Expect::One);
            }
            Op::ReacquireHolder => {
                let holder = token(HOLDER, spread(i, n));
                encode(out, &[b"LOCK.RELEASE", KEY, &holder]);
                acquire(out, limit, &holder);
                expect.extend([Expect::One, Expect::Grant]);
            }
            Op::InfoSemaphore => {
                encode(out, &[b"LOCK.INFO", KEY]);
                expect.push(Expect::Fields);
            }
            _ => unreachable!("{op:?} is not a holders operation"),
        })
    }
}
