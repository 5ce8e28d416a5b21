//! Scenario 4: memory. Bytes per held lock (`used_memory` delta over N locks) for a
//! fencelock lock (server-generated token), a floor-module lock (`FLOOR.ACQUIRE`: the
//! same holding, nothing else; same key names, same count) and a `SET NX PX` lock with
//! a 22-character token; and bytes left behind per released lock name: fencelock and
//! the floor delete the key, the Lua pattern keeps its `fence:` counter forever.
//!
//! `used_memory` is read on a separate idle connection after the loading connection
//! has closed, so client buffers do not count; after releases the reading waits until
//! Redis has shrunk its hash tables (serverCron) and the figure is stable.

use std::io;
use std::time::{Duration, Instant};

use testkit::resp::{encode, Conn, Reply};

use crate::measure::lua::{fence_key, lock_key, Scripts};
use crate::measure::operation::client_token;
use crate::measure::server::{self, flush, info_field, Server};
use crate::results::memory::MemoryResult;

const BATCH: u64 = 1_000;
const LEASE: &[u8] = b"3600000";

pub fn used_memory(probe: &mut Conn) -> io::Result<i64> {
    info_field(probe, "memory", "used_memory")?
        .parse()
        .map_err(|e| io::Error::other(format!("used_memory: {e}")))
}

/// Reads `used_memory` until three readings 150 ms apart agree (at most 5 s).
pub fn settled_memory(probe: &mut Conn) -> io::Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = used_memory(probe)?;
    let mut same = 0;
    while same < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(150));
        let now = used_memory(probe)?;
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    Ok(last)
}

/// Sends `count` commands built by `command` in pipelined batches on a fresh
/// connection (closed before returning) and hands every reply to `check`.
pub fn pipeline(
    server: &Server,
    count: u64,
    command: impl Fn(u64, &mut Vec<u8>),
    mut check: impl FnMut(u64, Reply) -> io::Result<()>,
) -> io::Result<()> {
    let mut conn = server::connect(server)?;
    let mut out = Vec::new();
    let mut next = 0;
    while next < count {
        let end = (next + BATCH).min(count);
        out.clear();
        for i in next..end {
            command(i, &mut out);
        }
        conn.send(&out)?;
        for i in next..end {
            check(i, conn.read_reply()?)?;
        }
        next = end;
    }
    Ok(())
}

pub fn expect(what: &str, ok: bool, reply: &Reply) -> io::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(io::Error::other(format!("{what} replied {reply:?}")))
    }
}

pub fn per_lock(before: i64, after: i64, n: u64) -> f64 {
    (after - before) as f64 / n as f64
}

/// A module's lock commands: fencelock's, or the floor module's.
#[derive(Clone, Copy)]
struct Module {
    acquire: &'static str,
    release: &'static str,
}

const FENCELOCK: Module = Module {
    acquire: "LOCK.ACQUIRE",
    release: "LOCK.RELEASE",
};

const FLOOR: Module = Module {
    acquire: "FLOOR.ACQUIRE",
    release: "FLOOR.RELEASE",
};

/// Bytes per held lock and per released lock name of one module, its tokens the ones
/// the server generated.
fn measure_module(
    server: &Server,
    probe: &mut Conn,
    module: Module,
    n: u64,
) -> io::Result<(f64, f64)> {
    flush(probe)?;
    let before = settled_memory(probe)?;
    let mut tokens = vec![Vec::new(); usize::try_from(n).unwrap_or(0)];
    let (acquire, release) = (module.acquire, module.release);
    pipeline(
        server,
        n,
        |i, out| encode(out, &[acquire.as_bytes(), lock_key(i).as_bytes(), LEASE]),
        |i, reply| {
            let (token, _) = reply
                .grant()
                .ok_or_else(|| io::Error::other(format!("{acquire} replied {reply:?}")))?;
            tokens[i as usize] = token.to_vec();
            Ok(())
        },
    )?;
    let held = settled_memory(probe)?;
    pipeline(
        server,
        n,
        |i, out| {
            encode(
                out,
                &[
                    release.as_bytes(),
                    lock_key(i).as_bytes(),
                    &tokens[i as usize],
                ],
            )
        },
        |_, reply| expect(release, reply.integer() == Some(1), &reply),
    )?;
    let left = settled_memory(probe)?;
    Ok((per_lock(before, held, n), per_lock(before, left, n)))
}

fn measure_lua(
    server: &Server,
    probe: &mut Conn,
    scripts: &Scripts,
    n: u64,
) -> io::Result<(f64, f64, f64)> {
    flush(probe)?;
    let before = settled_memory(probe)?;
    let token = client_token(0);
    pipeline(
        server,
        n,
        |i, out| {
            encode(
                out,
                &[b"SET", lock_key(i).as_bytes(), &token, b"NX", b"PX", LEASE],
            )
        },
        |_, reply| expect("SET NX PX", reply.is_ok(), &reply),
    )?;
    let held = settled_memory(probe)?;
    pipeline(
        server,
        n,
        |i, out| encode(out, &[b"INCR", fence_key(i).as_bytes()]),
        |_, reply| expect("INCR", reply.integer().is_some(), &reply),
    )?;
    let held_with_fence = settled_memory(probe)?;
    pipeline(
        server,
        n,
        |i, out| {
            encode(
                out,
                &[
                    b"EVALSHA",
                    &scripts.release,
                    b"1",
                    lock_key(i).as_bytes(),
                    &token,
                ],
            )
        },
        |_, reply| expect("Lua release", reply.integer() == Some(1), &reply),
    )?;
    let left = settled_memory(probe)?;
    Ok((
        per_lock(before, held, n),
        per_lock(before, held_with_fence, n),
        per_lock(before, left, n),
    ))
}

pub fn run(server: &Server, locks: u64, repetitions: usize) -> io::Result<MemoryResult> {
    let mut probe = server::connect(server)?;
    let scripts = Scripts::load(&mut probe)?;
    let mut result = MemoryResult {
        locks,
        ..MemoryResult::default()
    };
    // Alternating order, as throughput: fencelock, floor, SET NX PX, then the reverse;
    // fencelock and the floor always measured one after the other.
    for rep in 0..repetitions {
        let mut turns = [0, 1, 2];
        if rep % 2 == 1 {
            turns.reverse();
        }
        for turn in turns {
            if turn == 0 {
                let (held, left) = measure_module(server, &mut probe, FENCELOCK, locks)?;
                result.fencelock_held.push(held);
                result.fencelock_left.push(left);
                eprintln!(
                    "  [rep {}/{repetitions}] fencelock: {held:.1} B per held lock, {left:.2} B left per released name",
                    rep + 1
                );
            } else if turn == 1 {
                let (held, left) = measure_module(server, &mut probe, FLOOR, locks)?;
                result.floor_held.push(held);
                result.floor_left.push(left);
                eprintln!(
                    "  [rep {}/{repetitions}] floor module: {held:.1} B per held lock, {left:.2} B left per released name",
                    rep + 1
                );
            } else {
                let (held, with_fence, left) = measure_lua(server, &mut probe, &scripts, locks)?;
                result.set_held.push(held);
                result.set_with_fence_held.push(with_fence);
                result.lua_left.push(left);
                eprintln!(
                    "  [rep {}/{repetitions}] SET NX PX: {held:.1} B per held lock ({with_fence:.1} B with its fence key), {left:.2} B left per released name",
                    rep + 1
                );
            }
        }
    }
    flush(&mut probe)?;
    Ok(result)
}
