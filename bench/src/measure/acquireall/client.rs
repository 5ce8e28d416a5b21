//! One contending client of scenario 8's contention part, run as its own process (the
//! bench binary re-executed with `multikey-contender …`). It loops: think 0–2 ms, draw
//! a set of distinct keys out of a small key space (in random order), ask for all of
//! them, hold 0.5 ms, release each with `LOCK.RELEASE` (in one write). It asks either
//! with one `LOCK.ACQUIREALL n k… ttl BLOCK timeout` (the server queues it in every
//! key's queue at once) or as a client-side multi-lock does (Redisson's `MultiLock`
//! pattern without its waiting): `LOCK.ACQUIRE k ttl TOKEN t` for each key in the set's
//! order, without `BLOCK`; on a refusal it releases the keys it took and sleeps a
//! jittered exponential backoff (after the n-th refusal in a row, uniform in
//! 0..min(32 ms, 1 ms × 2^n)), then starts again from the first key.
//!
//! The protocol with the parent is scenario 3's (`contention::client::ready_then_go`, one
//! `Tally` line): a refused round of the multi-lock, or an `ACQUIREALL` timing out,
//! counts as a failed attempt.

use std::io;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use testkit::resp::{encode, Conn, Reply};

use crate::measure::contention::client::{ready_then_go, Tally};
use crate::measure::lua::Name;
use crate::measure::operation::client_token;
use crate::results::acquireall::Mechanism;

const KEY: &[u8] = b"multi:";
/// Lease per grant: far longer than a hold, so no lease ever runs out.
const TTL: &[u8] = b"10000";
pub const BLOCK_TIMEOUT_MS: u64 = 30_000;
const BLOCK_TIMEOUT: &[u8] = b"30000";
pub const THINK_MAX_US: u64 = 2_000;
pub const HOLD: Duration = Duration::from_micros(500);
pub const BACKOFF_BASE_US: u64 = 1_000;
pub const BACKOFF_CAP_US: u64 = 32_000;

impl Mechanism {
    fn arg(self) -> &'static str {
        match self {
            Mechanism::AcquireAll => "acquireall",
            Mechanism::MultiLock => "multilock",
        }
    }

    fn parse(arg: &str) -> Option<Self> {
        Mechanism::ALL.into_iter().find(|m| m.arg() == arg)
    }
}

/// The contender's arguments after port and client index.
pub fn args(mechanism: Mechanism, keyspace: u64, keys_per_set: u64) -> Vec<String> {
    vec![
        mechanism.arg().into(),
        keyspace.to_string(),
        keys_per_set.to_string(),
    ]
}

/// The sleep after the `refusals`-th refusal in a row (1 for the first): full jitter.
fn backoff(rng: &mut impl Rng, refusals: u32) -> Duration {
    let ceiling = BACKOFF_BASE_US
        .saturating_mul(1u64 << (refusals - 1).min(20))
        .min(BACKOFF_CAP_US);
    Duration::from_micros(rng.gen_range(0..=ceiling))
}

/// Entry point of `multikey-contender <port> <client-index> acquireall|multilock
/// <keyspace> <keys-per-set>`.
pub fn main(args: &[String]) -> io::Result<()> {
    let number = |i: usize| args.get(i).and_then(|n| n.parse::<u64>().ok());
    let (Some(port), Some(index), Some(mechanism), Some(keyspace), Some(per_set)) = (
        args.first().and_then(|p| p.parse::<u16>().ok()),
        args.get(1).and_then(|i| i.parse::<usize>().ok()),
        args.get(2).and_then(|m| Mechanism::parse(m)),
        number(3),
        number(4),
    ) else {
        return Err(io::Error::other(format!(
            "bad multikey-contender arguments {args:?}"
        )));
    };
    if per_set == 0 || per_set > keyspace {
        return Err(io::Error::other(format!(
            "{per_set} keys per set out of {keyspace}"
        )));
    }
    let mut conn = Conn::connect(port)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xA11_CE75 ^ index as u64);
    let names: Vec<Name> = (0..keyspace).map(|i| Name::new(KEY, i)).collect();
    let token = client_token(index);
    let duration_ms = ready_then_go()?;
    let start = Instant::now();
    let deadline = start + Duration::from_millis(duration_ms);
    let mut tally = Tally::default();
    let mut set: Vec<&[u8]> = Vec::with_capacity(per_set as usize);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..=THINK_MAX_US)));
        set.clear();
        set.extend(
            rand::seq::index::sample(&mut rng, keyspace as usize, per_set as usize)
                .into_iter()
                .map(|i| names[i].as_bytes()),
        );
        set.shuffle(&mut rng);
        let asked = Instant::now();
        let held_token = match mechanism {
            Mechanism::AcquireAll => ask_all(&mut conn, &set, &mut tally)?,
            Mechanism::MultiLock => {
                ask_one_by_one(&mut conn, &set, &token, &mut rng, &mut tally)?;
                token.to_vec()
            }
        };
        let granted = Instant::now();
        std::thread::sleep(HOLD);
        tally.lost += release(&mut conn, &set, &held_token)?;
        tally.grant(asked, granted, deadline);
    }
    tally.report()
}

/// `LOCK.ACQUIREALL n k… ttl BLOCK timeout` until granted (nil, a timeout, is a
/// failure); the token granted.
fn ask_all(conn: &mut Conn, set: &[&[u8]], tally: &mut Tally) -> io::Result<Vec<u8>> {
    let numkeys = set.len().to_string();
    let mut argv: Vec<&[u8]> = vec![b"LOCK.ACQUIREALL", numkeys.as_bytes()];
    argv.extend_from_slice(set);
    argv.extend([TTL, b"BLOCK", BLOCK_TIMEOUT]);
    loop {
        let reply = conn.call(&argv)?;
        if reply.is_nil() {
            tally.failed += 1;
            continue;
        }
        return match &reply {
            Reply::Array(Some(items)) => match items.as_slice() {
                [Reply::Bulk(Some(token)), Reply::Array(Some(fences))]
                    if fences.len() == set.len() =>
                {
                    Ok(token.clone())
                }
                _ => Err(io::Error::other(format!(
                    "LOCK.ACQUIREALL replied {reply:?}"
                ))),
            },
            _ => Err(io::Error::other(format!(
                "LOCK.ACQUIREALL replied {reply:?}"
            ))),
        };
    }
}

/// Each key in order with `LOCK.ACQUIRE k ttl TOKEN t`, no `BLOCK`; on a refusal the
/// keys taken are given back, the client backs off and starts again, until it holds
/// them all.
fn ask_one_by_one(
    conn: &mut Conn,
    set: &[&[u8]],
    token: &[u8],
    rng: &mut impl Rng,
    tally: &mut Tally,
) -> io::Result<()> {
    let mut refusals = 0;
    loop {
        let mut taken = 0;
        for key in set {
            let reply = conn.call(&[b"LOCK.ACQUIRE", key, TTL, b"TOKEN", token])?;
            if reply.is_nil() {
                break;
            }
            if reply.grant().is_none_or(|(granted, _)| granted != token) {
                return Err(io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}")));
            }
            taken += 1;
        }
        if taken == set.len() {
            return Ok(());
        }
        if release(conn, &set[..taken], token)? > 0 {
            return Err(io::Error::other("a key just taken was not held any more"));
        }
        tally.failed += 1;
        refusals += 1;
        std::thread::sleep(backoff(rng, refusals));
    }
}

/// `LOCK.RELEASE k t` for each key, in one write; how many found the lease gone.
fn release(conn: &mut Conn, keys: &[&[u8]], token: &[u8]) -> io::Result<u64> {
    if keys.is_empty() {
        return Ok(0);
    }
    let mut out = Vec::with_capacity(keys.len() * 64);
    for key in keys {
        encode(&mut out, &[b"LOCK.RELEASE", key, token]);
    }
    conn.send(&out)?;
    let mut lost = 0;
    for _ in keys {
        if conn.read_reply()?.integer() != Some(1) {
            lost += 1;
        }
    }
    Ok(lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Full jitter under a ceiling that doubles from 1 ms per refusal and stops at 32 ms.
    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for (refusals, ceiling_us) in [(1, 1_000), (2, 2_000), (6, 32_000), (40, 32_000)] {
            let longest = (0..2_000)
                .map(|_| backoff(&mut rng, refusals))
                .max()
                .unwrap();
            assert!(longest <= Duration::from_micros(ceiling_us));
            assert!(longest >= Duration::from_micros(ceiling_us * 9 / 10));
        }
    }
}
