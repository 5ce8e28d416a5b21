//! One contending client of scenario 3, run as its own process (the bench binary
//! re-executed with `contender …`). It loops on one key: think 0–2 ms, ask, hold
//! 0.5 ms, release. The key is a lock (one holder at a time) or a semaphore of n
//! permits. It asks either with `LOCK.ACQUIRE … BLOCK` (with `LIMIT n` for the
//! semaphore; the server queues it) or by polling every `retry` ms: `SET NX PX`,
//! released with the Lua script, for the lock; the ZSET semaphore script, released
//! with `ZREM`, for the semaphore.
//!
//! Protocol with the parent: the child connects, prints `ready`, waits for a
//! `go <duration-ms>` line on stdin, runs, and prints one JSON line with its counts
//! and every wait (ask to grant) in microseconds.

use std::io::{self, BufRead, Write};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use testkit::resp::Conn;

use crate::measure::lua::Scripts;
use crate::measure::operation::client_token;
use crate::results::contention::{Lock, Mode};

/// The one contended key.
pub const KEY: &[u8] = b"lock:contended";
/// Lease per grant: far longer than a hold, so no lease ever runs out.
const TTL: &[u8] = b"10000";
/// BLOCK timeout: a waiter answered nil after this counts as a failed attempt.
const BLOCK_TIMEOUT: &[u8] = b"30000";
const THINK_MAX_US: u64 = 2_000;
const HOLD: Duration = Duration::from_micros(500);

/// The contender's command line names the lock and the mode in these words.
impl Lock {
    fn arg(self) -> String {
        match self {
            Lock::Mutex => "mutex".into(),
            Lock::Semaphore { limit } => format!("semaphore:{limit}"),
        }
    }

    fn parse(arg: &str) -> Option<Self> {
        match arg.split_once(':') {
            None if arg == "mutex" => Some(Lock::Mutex),
            Some(("semaphore", limit)) => limit.parse().ok().map(|limit| Lock::Semaphore { limit }),
            _ => None,
        }
    }
}

/// The contender's arguments after port and client index.
pub fn args(lock: Lock, mode: Mode) -> Vec<String> {
    std::iter::once(lock.arg()).chain(mode.args()).collect()
}

impl Mode {
    fn args(self) -> Vec<String> {
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

/// What one contender did in its run: the line it prints for the parent.
#[derive(Default, Serialize, Deserialize)]
pub struct Tally {
    /// Every grant, also those asked for inside the window and granted after it.
    pub grants: u64,
    /// Grants that came inside the window (the per-client share, and grants/s).
    pub grants_in_window: u64,
    pub failed: u64,
    /// Releases that found the lease gone.
    pub lost: u64,
    /// Every wait, ask to grant, in µs.
    pub waits_us: Vec<u64>,
}

impl Tally {
    /// Counts a grant asked for at `asked` and granted at `granted`, in a run whose
    /// window ends at `deadline`.
    pub fn grant(&mut self, asked: Instant, granted: Instant, deadline: Instant) {
        self.grants += 1;
        if granted <= deadline {
            self.grants_in_window += 1;
        }
        self.waits_us
            .push(u64::try_from(granted.duration_since(asked).as_micros()).unwrap_or(u64::MAX));
    }

    /// Prints the tally as the one JSON line the parent reads (`processes::run`).
    pub fn report(&self) -> io::Result<()> {
        let report = serde_json::to_string(self).map_err(io::Error::other)?;
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "{report}")?;
        stdout.flush()
    }
}

/// A contender's side of the start: says `ready` to the parent (`processes::run`), then
/// waits for `go <ms>` and returns how long to run.
pub fn ready_then_go() -> io::Result<u64> {
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    line.strip_prefix("go ")
        .and_then(|d| d.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("expected `go <ms>`, got {line:?}")))
}

/// Entry point of `contender <port> <client-index> mutex|semaphore:<n> block|poll
/// <retry-ms>`.
pub fn main(args: &[String]) -> io::Result<()> {
    let (Some(port), Some(index), Some(lock), Some(mode)) = (
        args.first().and_then(|p| p.parse::<u16>().ok()),
        args.get(1).and_then(|i| i.parse::<usize>().ok()),
        args.get(2).and_then(|l| Lock::parse(l)),
        Mode::parse(args.get(3..).unwrap_or_default()),
    ) else {
        return Err(io::Error::other(format!(
            "bad contender arguments {args:?}"
        )));
    };
    let mut conn = Conn::connect(port)?;
    let scripts = Scripts::load(&mut conn)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xFE4C_E10C ^ index as u64);
    let duration_ms = ready_then_go()?;
    let start = Instant::now();
    let deadline = start + Duration::from_millis(duration_ms);
    let token = client_token(index);
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..=THINK_MAX_US)));
        let asked = Instant::now();
        let held_token = match mode {
            Mode::Block => ask_blocking(&mut conn, lock, &mut tally)?,
            Mode::Poll { retry_ms } => {
                let mut attempt = || try_polled(&mut conn, &scripts, lock, &token);
                ask_polling(&mut attempt, &token, retry_ms, &mut tally)?
            }
        };
        let granted = Instant::now();
        std::thread::sleep(HOLD);
        let released = match (mode, lock) {
            (Mode::Block, _) => conn.call(&[b"LOCK.RELEASE", KEY, &held_token])?,
            (Mode::Poll { .. }, Lock::Mutex) => {
                conn.call(&[b"EVALSHA", &scripts.release, b"1", KEY, &held_token])?
            }
            (Mode::Poll { .. }, Lock::Semaphore { .. }) => {
                conn.call(&[b"ZREM", KEY, &held_token])?
            }
        };
        if released.integer() != Some(1) {
            tally.lost += 1;
        }
        tally.grant(asked, granted, deadline);
    }
    tally.report()
}

/// `LOCK.ACQUIRE key ttl BLOCK timeout` (`… LIMIT n` for a semaphore) until granted;
/// nil (timed out) is a failure.
fn ask_blocking(conn: &mut Conn, lock: Lock, tally: &mut Tally) -> io::Result<Vec<u8>> {
    let limit = match lock {
        Lock::Mutex => None,
        Lock::Semaphore { limit } => Some(limit.to_string()),
    };
    let mut argv: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", KEY, TTL, b"BLOCK", BLOCK_TIMEOUT];
    if let Some(limit) = &limit {
        argv.extend([&b"LIMIT"[..], limit.as_bytes()]);
    }
    loop {
        let reply = conn.call(&argv)?;
        if !reply.is_nil() {
            return reply
                .grant()
                .map(|(token, _fence)| token.to_vec())
                .ok_or_else(|| io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}")));
        }
        tally.failed += 1;
    }
}

/// One polled attempt: `SET key token NX PX ttl` for the lock, the ZSET semaphore
/// script for a semaphore. Whether it was granted.
fn try_polled(conn: &mut Conn, scripts: &Scripts, lock: Lock, token: &[u8]) -> io::Result<bool> {
    let (reply, granted) = match lock {
        Lock::Mutex => {
            let reply = conn.call(&[b"SET", KEY, token, b"NX", b"PX", TTL])?;
            let granted = if reply.is_ok() {
                Some(true)
            } else if reply.is_nil() {
                Some(false)
            } else {
                None
            };
            (reply, granted)
        }
        Lock::Semaphore { limit } => {
            let limit = limit.to_string();
            let reply = scripts
                .semaphore_acquire(KEY, token, TTL, limit.as_bytes(), |argv| conn.call(argv))?;
            let granted = match reply.integer() {
                Some(1) => Some(true),
                Some(0) => Some(false),
                _ => None,
            };
            (reply, granted)
        }
    };
    granted.ok_or_else(|| io::Error::other(format!("{} attempt replied {reply:?}", lock.label())))
}

/// `attempt` until granted, sleeping `retry_ms` after each refusal.
fn ask_polling(
    attempt: &mut impl FnMut() -> io::Result<bool>,
    token: &[u8],
    retry_ms: u64,
    tally: &mut Tally,
) -> io::Result<Vec<u8>> {
    while !attempt()? {
        tally.failed += 1;
        std::thread::sleep(Duration::from_millis(retry_ms));
    }
    Ok(token.to_vec())
}
