//! One contending client of scenario 3, run as its own process (the bench binary
//! re-executed with `contender …`). It loops on one key: think 0–2 ms, ask, hold
//! 0.5 ms, release — asking either with `LOCK.ACQUIRE … BLOCK` (the server queues it)
//! or by polling `SET NX PX` every `retry` ms, releasing with the Lua script.
//!
//! Protocol with the parent: the child connects, prints `ready`, waits for a
//! `go <duration-ms>` line on stdin, runs, and prints one JSON line with its counts
//! and every wait (ask to grant) in microseconds.

use std::io::{self, BufRead, Write};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use testkit::resp::Conn;

use crate::load::client_token;
use crate::lua::Scripts;

/// The one contended key.
pub const KEY: &[u8] = b"lock:contended";
/// Lease per grant: far longer than a hold, so no lease ever runs out.
const TTL: &[u8] = b"10000";
/// BLOCK timeout: a waiter answered nil after this counts as a failed attempt.
const BLOCK_TIMEOUT: &[u8] = b"30000";
const THINK_MAX_US: u64 = 2_000;
const HOLD: Duration = Duration::from_micros(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Block,
    Poll { retry_ms: u64 },
}

impl Mode {
    pub fn label(self) -> String {
        match self {
            Mode::Block => "fencelock BLOCK".into(),
            Mode::Poll { retry_ms } => format!("polling {retry_ms} ms"),
        }
    }

    pub fn args(self) -> Vec<String> {
        match self {
            Mode::Block => vec!["block".into()],
            Mode::Poll { retry_ms } => vec!["poll".into(), retry_ms.to_string()],
        }
    }

    fn parse(args: &[String]) -> Option<Self> {
        match args {
            [mode] if mode == "block" => Some(Mode::Block),
            [mode, retry] if mode == "poll" => {
                retry.parse().ok().map(|retry_ms| Mode::Poll { retry_ms })
            }
            _ => None,
        }
    }
}

struct Tally {
    grants: u64,
    grants_in_window: u64,
    failed: u64,
    lost: u64,
    waits_us: Vec<u64>,
}

/// Entry point of `contender <port> <client-index> block|poll <retry-ms>`.
pub fn main(args: &[String]) -> io::Result<()> {
    let (Some(port), Some(index), Some(mode)) = (
        args.first().and_then(|p| p.parse::<u16>().ok()),
        args.get(1).and_then(|i| i.parse::<usize>().ok()),
        Mode::parse(args.get(2..).unwrap_or_default()),
    ) else {
        return Err(io::Error::other(format!(
            "bad contender arguments {args:?}"
        )));
    };
    let mut conn = Conn::connect(port)?;
    let scripts = Scripts::load(&mut conn)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xFE4C_E10C ^ index as u64);
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    let duration_ms: u64 = line
        .strip_prefix("go ")
        .and_then(|d| d.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("expected `go <ms>`, got {line:?}")))?;
    let start = Instant::now();
    let deadline = start + Duration::from_millis(duration_ms);
    let token = client_token(index);
    let mut tally = Tally {
        grants: 0,
        grants_in_window: 0,
        failed: 0,
        lost: 0,
        waits_us: Vec::new(),
    };
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..=THINK_MAX_US)));
        let asked = Instant::now();
        let held_token = match mode {
            Mode::Block => ask_blocking(&mut conn, &mut tally)?,
            Mode::Poll { retry_ms } => ask_polling(&mut conn, &token, retry_ms, &mut tally)?,
        };
        let granted = Instant::now();
        std::thread::sleep(HOLD);
        let released = match mode {
            Mode::Block => conn.call(&[b"LOCK.RELEASE", KEY, &held_token])?,
            Mode::Poll { .. } => {
                conn.call(&[b"EVALSHA", &scripts.release, b"1", KEY, &held_token])?
            }
        };
        if released.integer() != Some(1) {
            tally.lost += 1;
        }
        tally.grants += 1;
        if granted <= deadline {
            tally.grants_in_window += 1;
        }
        tally
            .waits_us
            .push(u64::try_from(granted.duration_since(asked).as_micros()).unwrap_or(u64::MAX));
    }
    let report = serde_json::json!({
        "grants": tally.grants,
        "grants_in_window": tally.grants_in_window,
        "failed": tally.failed,
        "lost": tally.lost,
        "waits_us": tally.waits_us,
    });
    writeln!(stdout, "{report}")?;
    stdout.flush()
}

/// `LOCK.ACQUIRE key ttl BLOCK timeout` until granted; nil (timed out) is a failure.
fn ask_blocking(conn: &mut Conn, tally: &mut Tally) -> io::Result<Vec<u8>> {
    loop {
        let reply = conn.call(&[b"LOCK.ACQUIRE", KEY, TTL, b"BLOCK", BLOCK_TIMEOUT])?;
        if !reply.is_nil() {
            return reply
                .grant()
                .map(|(token, _fence)| token.to_vec())
                .ok_or_else(|| io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}")));
        }
        tally.failed += 1;
    }
}

/// `SET key token NX PX ttl`, sleeping `retry_ms` after each refusal.
fn ask_polling(
    conn: &mut Conn,
    token: &[u8],
    retry_ms: u64,
    tally: &mut Tally,
) -> io::Result<Vec<u8>> {
    loop {
        let reply = conn.call(&[b"SET", KEY, token, b"NX", b"PX", TTL])?;
        if reply.is_ok() {
            return Ok(token.to_vec());
        }
        if !reply.is_nil() {
            return Err(io::Error::other(format!("SET NX PX replied {reply:?}")));
        }
        tally.failed += 1;
        std::thread::sleep(Duration::from_millis(retry_ms));
    }
}
