"""Uncontended acquire/release cycles of the Python client, against redis-py's own lock.

One run starts its own redis-server with the fencelock module loaded
(``FENCELOCK_REDIS_SERVER``, default ``redis-server`` on PATH; ``FENCELOCK_MODULE``,
default ``target/release/libfencelock.so`` of this repository) and measures, for each
wait B in None / 0 / 1 / 5 / 60 seconds, on a sync ``redis.Redis`` and on a
``redis.asyncio.Redis`` (redis-py's defaults: a 5 s socket timeout on redis-py 8):

- ``with r.lock(name, timeout=10, blocking_timeout=B)``: redis-py's ``redis.lock.Lock``
  (``SET NX PX``, release by Lua), the baseline of each row;
- the same with ``lock_class=fencelock.Lock`` (``fencelock.asyncio.Lock``);
- ``with fencelock.Locks(r).lock(name, ttl=10, wait=B)`` (and its asyncio twin).

Every row has its own client and lock name. The rows run interleaved: the three rows
of one API and wait as a group, the groups in a new shuffled order in each repetition,
and within a group in slices (10 rounds of 200 cycles per row, each round in a
shuffled order), so that machine noise hits the rows a ratio compares alike. Each
figure is the median of the repetitions with their min-max, and each ratio
(÷ redis-py) is taken within one repetition, against the redis-py row of the same API
and wait, before its median is taken. New server connections are read from
``INFO stats`` (``total_connections_received``) around every batch, by a client of
their own.

    python benchmarks/cycles.py             # full run (~1.5 minutes)
    python benchmarks/cycles.py --quick     # a few seconds, same rows (smoke test)
    python benchmarks/cycles.py --profile sync:fencelock.Lock:60   # cProfile one row

Output: a Markdown table on stdout, written to ``target/bench/python-cycles.md``,
and the raw figures to ``target/bench/python-cycles.json`` (``--quick``:
``target/bench/smoke/``; ``--out`` picks another directory).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Union

import redis
import redis.asyncio

import fencelock
import fencelock.asyncio

REPO = Path(__file__).resolve().parents[3]
WAITS: tuple[Optional[int], ...] = (None, 0, 1, 5, 60)
APIS = ("sync", "asyncio")
KINDS = ("redis-py", "fencelock.Lock", "fencelock.Locks")
BASELINE = "redis-py"
TTL = 10
TARGET_RATIO = 1.1
# New connections a client may open for the whole run: one per concurrent waiter,
# and every row here has a single one.
TARGET_CONNECTIONS = 1

SyncRun = Callable[[int], None]
AsyncRun = Callable[[int], Awaitable[None]]


@dataclass(frozen=True)
class Row:
    api: str
    kind: str
    wait: Optional[int]

    @property
    def spec(self) -> str:
        """``api:kind:wait``, as ``--profile`` takes it."""
        return f"{self.api}:{self.kind}:{self.wait}"

    @property
    def baseline(self) -> Row:
        return Row(self.api, BASELINE, self.wait)


@dataclass
class Samples:
    # Microseconds per cycle, one per repetition.
    us: list[float] = field(default_factory=list)
    # Ratio to the baseline row of the same repetition.
    ratio: list[float] = field(default_factory=list)
    # New server connections during each repetition's batch.
    connections: list[int] = field(default_factory=list)
    # New server connections during the warm-up (the client's first ones).
    warmup_connections: int = 0


# ---------------------------------------------------------------------------------
# The server


def server_binary() -> str:
    return os.environ.get("FENCELOCK_REDIS_SERVER", "redis-server")


def module_path() -> str:
    return os.environ.get(
        "FENCELOCK_MODULE", str(REPO / "target/release/libfencelock.so")
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server() -> Iterator[int]:
    """A redis-server with the module on a free port, killed on leaving; its port."""
    with tempfile.TemporaryDirectory(prefix="fencelock-bench-") as directory:
        port = free_port()
        log = Path(directory) / "server.log"
        process = subprocess.Popen(
            [
                server_binary(),
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--dir", directory,
                "--save", "",
                "--appendonly", "no",
                "--logfile", str(log),
                "--loadmodule", module_path(),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_ready(process, port, log)
            yield port
        finally:
            process.kill()
            process.wait()


def wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = log.read_text() if log.exists() else ""
            raise RuntimeError(f"server exited: {text}")
        try:
            with redis.Redis(port=port) as client:
                client.ping()
            return
        except redis.ConnectionError:
            time.sleep(0.02)
    raise RuntimeError("server did not start")


# ---------------------------------------------------------------------------------
# The cycles


def sync_run(row: Row, client: redis.Redis) -> SyncRun:
    name = f"bench:{row.spec}"
    wait = row.wait
    if row.kind == "redis-py":

        def run(n: int) -> None:
            for _ in range(n):
                with client.lock(name, timeout=TTL, blocking_timeout=wait):
                    pass

    elif row.kind == "fencelock.Lock":

        def run(n: int) -> None:
            for _ in range(n):
                with client.lock(
                    name, timeout=TTL, blocking_timeout=wait, lock_class=fencelock.Lock
                ):
                    pass

    else:
        locks = fencelock.Locks(client)

        def run(n: int) -> None:
            for _ in range(n):
                with locks.lock(name, ttl=TTL, wait=wait):
                    pass

    return run


def async_run(row: Row, client: redis.asyncio.Redis) -> AsyncRun:
    name = f"bench:{row.spec}"
    wait = row.wait
    if row.kind == "redis-py":

        async def run(n: int) -> None:
            for _ in range(n):
                async with client.lock(name, timeout=TTL, blocking_timeout=wait):
                    pass

    elif row.kind == "fencelock.Lock":

        async def run(n: int) -> None:
            for _ in range(n):
                async with client.lock(
                    name,
                    timeout=TTL,
                    blocking_timeout=wait,
                    # redis-py annotates lock_class as its own asyncio Lock class.
                    lock_class=fencelock.asyncio.Lock,  # type: ignore[arg-type]
                ):
                    pass

    else:
        locks = fencelock.asyncio.Locks(client)

        async def run(n: int) -> None:
            for _ in range(n):
                async with locks.lock(name, ttl=TTL, wait=wait):
                    pass

    return run


class Bench:
    """Every row's client and cycle function, on one event loop for the asyncio ones."""

    def __init__(self, port: int, rows: list[Row]) -> None:
        self.port = port
        self.rows = rows
        self.loop = asyncio.new_event_loop()
        self.admin = redis.Redis(port=port)
        self.sync_clients: list[redis.Redis] = []
        self.async_clients: list[redis.asyncio.Redis] = []
        self.runs: dict[Row, Union[SyncRun, AsyncRun]] = {}
        for row in rows:
            if row.api == "sync":
                client = redis.Redis(port=port)
                self.sync_clients.append(client)
                self.runs[row] = sync_run(row, client)
            else:
                aclient = redis.asyncio.Redis(port=port)
                self.async_clients.append(aclient)
                self.runs[row] = async_run(row, aclient)

    def close(self) -> None:
        for client in self.sync_clients:
            client.close()
        for aclient in self.async_clients:
            self.loop.run_until_complete(aclient.aclose())
        self.admin.close()
        self.loop.close()

    def connections(self) -> int:
        return int(self.admin.info("stats")["total_connections_received"])

    def timed(self, row: Row, n: int) -> tuple[int, int]:
        """Runs ``n`` cycles of ``row``: nanoseconds taken, new server connections."""
        run = self.runs[row]
        gc.collect()
        before = self.connections()
        if row.api == "sync":
            start = time.perf_counter_ns()
            run(n)
            elapsed = time.perf_counter_ns() - start
        else:
            elapsed = self.loop.run_until_complete(_timed_async(run, n))
        return elapsed, self.connections() - before

    def profile(self, row: Row, n: int) -> pstats.Stats:
        run = self.runs[row]
        profiler = cProfile.Profile()
        if row.api == "sync":
            profiler.runcall(run, n)
        else:
            profiler.runcall(self.loop.run_until_complete, _awaited(run, n))
        return pstats.Stats(profiler)


async def _timed_async(run: Union[SyncRun, AsyncRun], n: int) -> int:
    start = time.perf_counter_ns()
    await _awaited(run, n)
    return time.perf_counter_ns() - start


async def _awaited(run: Union[SyncRun, AsyncRun], n: int) -> None:
    result = run(n)
    if result is not None:
        await result


def all_rows() -> list[Row]:
    return [Row(api, kind, wait) for api in APIS for wait in WAITS for kind in KINDS]


def measure(
    bench: Bench, reps: int, cycles: int, slices: int, warmup: int, seed: int
) -> dict[Row, Samples]:
    """``reps`` repetitions of ``cycles`` cycles per row. The rows of one API and wait
    run as a group (groups in a new shuffled order each repetition), and within a
    group in ``slices`` rounds of ``cycles / slices`` cycles per row, so that the
    rows a ratio compares share the machine's noise of the same second."""
    samples = {row: Samples() for row in bench.rows}
    for row in bench.rows:
        samples[row].warmup_connections = bench.timed(row, warmup)[1]
    rng = random.Random(seed)
    groups: dict[tuple[str, Optional[int]], list[Row]] = {}
    for row in bench.rows:
        groups.setdefault((row.api, row.wait), []).append(row)
    sizes = [cycles // slices + (i < cycles % slices) for i in range(slices)]
    for rep in range(reps):
        started = time.monotonic()
        for group in rng.sample(list(groups.values()), len(groups)):
            elapsed = dict.fromkeys(group, 0)
            opened = dict.fromkeys(group, 0)
            for size in sizes:
                for row in rng.sample(group, len(group)):
                    ns, new = bench.timed(row, size)
                    elapsed[row] += ns
                    opened[row] += new
            for row in group:
                samples[row].us.append(elapsed[row] / cycles / 1000)
                samples[row].connections.append(opened[row])
        for row in bench.rows:
            baseline = samples[row.baseline].us[rep]
            samples[row].ratio.append(samples[row].us[rep] / baseline)
        print(
            f"repetition {rep + 1}/{reps}: {time.monotonic() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return samples


# ---------------------------------------------------------------------------------
# The report


def wait_label(wait: Optional[int]) -> str:
    return "None" if wait is None else str(wait)


def per_thousand(opened: list[int], cycles: int) -> float:
    return sum(opened) * 1000 / (cycles * len(opened))


def summary(row: Row, s: Samples, cycles: int) -> dict[str, Any]:
    whole_run = s.warmup_connections + sum(s.connections)
    ratio = statistics.median(s.ratio)
    return {
        "api": row.api,
        "lock": row.kind,
        "wait": row.wait,
        "us_median": statistics.median(s.us),
        "us_min": min(s.us),
        "us_max": max(s.us),
        "us": s.us,
        "ratio_median": ratio,
        "ratio_min": min(s.ratio),
        "ratio_max": max(s.ratio),
        "ratio": s.ratio,
        "ratio_ok": row.kind == BASELINE or ratio <= TARGET_RATIO,
        "connections_per_1000": per_thousand(s.connections, cycles),
        "connections": s.connections,
        "connections_whole_run": whole_run,
        "connections_ok": whole_run <= TARGET_CONNECTIONS,
    }


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Python client: uncontended acquire/release cycles",
        "",
        f"{meta['server']} with the fencelock module, Python {meta['python']}, "
        f"redis-py {meta['redis_py']} (socket timeout {meta['socket_timeout']} s), "
        f"{meta['cpus']} CPUs; {meta['reps']} interleaved repetitions of "
        f"{meta['cycles']:,} cycles per row, in {meta['slices']} interleaved slices "
        f"({meta['warmup']:,} warm-up cycles first), {meta['date']}"
        f"{' — quick run' if meta['quick'] else ''}; "
        f"1-minute load average {meta['load_before']} before, "
        f"{meta['load_after']} after.",
        "",
        "One cycle: `with r.lock(name, timeout=10, blocking_timeout=B)` (redis-py's "
        "`redis.lock.Lock`, or `lock_class=fencelock.Lock`), or "
        "`with fencelock.Locks(r).lock(name, ttl=10, wait=B)`; `async with` on "
        "`redis.asyncio.Redis`. µs per cycle: median (min-max) of the repetitions. "
        f"÷ redis-py: the same repetition's redis-py row (target ≤ {TARGET_RATIO}x). "
        "New connections: server `total_connections_received` per 1,000 measured "
        "cycles, and for the whole run including the warm-up (target ≤ "
        f"{TARGET_CONNECTIONS}: one waiter at a time).",
        "",
        "| API | lock | B | µs/cycle | min-max | ÷ redis-py | min-max | "
        "conns/1k cycles | conns, whole run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row["lock"] == BASELINE:
            ratio, spread = "1.00x", ""
        else:
            mark = "" if row["ratio_ok"] else " ✗"
            ratio = f"{row['ratio_median']:.2f}x{mark}"
            spread = f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f}"
        conns_mark = "" if row["connections_ok"] else " ✗"
        lines.append(
            f"| {row['api']} | {row['lock']} | {wait_label(row['wait'])} "
            f"| {row['us_median']:.1f} | {row['us_min']:.1f}-{row['us_max']:.1f} "
            f"| {ratio} | {spread} | {row['connections_per_1000']:.2f} "
            f"| {row['connections_whole_run']}{conns_mark} |"
        )
    misses = [
        f"{r['api']} {r['lock']} B={wait_label(r['wait'])} ({r['ratio_median']:.2f}x)"
        for r in rows
        if not r["ratio_ok"]
    ]
    lines += [
        "",
        "Rows above the ratio target: "
        + (", ".join(misses) if misses else "none")
        + ".",
    ]
    leaks = [
        f"{r['api']} {r['lock']} B={wait_label(r['wait'])}"
        for r in rows
        if not r["connections_ok"]
    ]
    lines.append(
        "Rows above the connection target: "
        + (", ".join(leaks) if leaks else "none")
        + "."
    )
    return "\n".join(lines) + "\n"


def metadata(port: int, args: argparse.Namespace) -> dict[str, Any]:
    with redis.Redis(port=port) as client:
        info = client.info("server")
        socket_timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
    flavour = "Valkey" if "valkey_version" in info else "Redis"
    version = info.get("valkey_version", info.get("redis_version"))
    return {
        "server": f"{flavour} {version}",
        "server_binary": server_binary(),
        "module": module_path(),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "fencelock": fencelock.__version__,
        "socket_timeout": socket_timeout,
        "cpus": os.cpu_count(),
        "reps": args.reps,
        "cycles": args.cycles,
        "slices": args.slices,
        "warmup": args.warmup,
        "seed": args.seed,
        "quick": args.quick,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": load_average(),
    }


def load_average() -> Optional[float]:
    """The 1-minute load average (None where the OS has none): noise shows here."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


# ---------------------------------------------------------------------------------
# The command line


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a few seconds: 3 reps of 150 cycles"
    )
    parser.add_argument("--reps", type=int, help="repetitions (default 5)")
    parser.add_argument("--cycles", type=int, help="cycles per row and rep (2000)")
    parser.add_argument(
        "--slices", type=int, help="rounds a group's cycles are split into (10)"
    )
    parser.add_argument("--warmup", type=int, help="warm-up cycles per row (200)")
    parser.add_argument("--seed", type=int, default=1, help="shuffle seed")
    parser.add_argument(
        "--out", type=Path, help="report directory (target/bench; --quick: …/smoke)"
    )
    parser.add_argument(
        "--profile",
        metavar="API:LOCK:B",
        help="run one row under cProfile instead (e.g. sync:fencelock.Lock:60) "
        "and print its top functions",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    if args.reps is None:
        args.reps = 3 if quick else 5
    if args.cycles is None:
        args.cycles = 150 if quick else 2000
    if args.slices is None:
        args.slices = 3 if quick else 10
    if args.warmup is None:
        args.warmup = 20 if quick else 200
    if args.out is None:
        args.out = REPO / "target/bench" / ("smoke" if quick else "")
    if min(args.reps, args.cycles, args.slices, args.warmup) < 1:
        parser.error("--reps, --cycles, --slices and --warmup must be at least 1")
    if args.slices > args.cycles:
        parser.error("--slices must not exceed --cycles")
    return args


def find_row(spec: str) -> Row:
    for row in all_rows():
        if row.spec == spec:
            return row
    known = ", ".join(row.spec for row in all_rows())
    raise SystemExit(f"no row {spec!r}; rows: {known}")


def profile(port: int, spec: str, args: argparse.Namespace) -> None:
    row = find_row(spec)
    bench = Bench(port, [row])
    try:
        bench.timed(row, args.warmup)
        stats = bench.profile(row, args.cycles)
    finally:
        bench.close()
    print(f"cProfile of {args.cycles} cycles of {row.spec}:")
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(30)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    with server() as port:
        if args.profile:
            profile(port, args.profile, args)
            return 0
        meta = metadata(port, args)
        bench = Bench(port, all_rows())
        try:
            samples = measure(
                bench, args.reps, args.cycles, args.slices, args.warmup, args.seed
            )
        finally:
            bench.close()
    meta["load_after"] = load_average()
    rows = [summary(row, samples[row], args.cycles) for row in all_rows()]
    report = markdown(meta, rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "python-cycles.md").write_text(report)
    (args.out / "python-cycles.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    sys.stdout.write(report)
    print(f"\nwritten: {args.out / 'python-cycles.md'}, python-cycles.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
