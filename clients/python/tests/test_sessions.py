"""Sessions (``Locks(client, session=True)``, the default), what the threads' side
does its own way, written by hand: a holder process killed or paused (its locks freed
within their ttl, or quarantined for the lock-delay: a child process and its
signals), and ``close()`` releasing every lock while threads wait for them on each
other's events. The asyncio side's own (``close``/``aclose``, cancellation) is
tests/test_asyncio_sessions.py; what both sides do alike, Redis Cluster included, is
tests/_async/test_sessions.py (the sync side generated from it)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from conftest import async_client
from servers import Server, wait_until
from session_counts import Counts

import fencelock
import fencelock.asyncio
from fencelock import Lease, LockLost, LockNotAcquired, Locks


def holds(client: redis.Redis, lease: Lease) -> bool:
    return bool(client.execute_command("LOCK.FENCE", lease.key, lease.token))


def waiting(client: redis.Redis, names: list[str]) -> int:
    """How many acquires wait in the queues of the locks ``names``."""
    infos = [fencelock.lock_info(client, f"lock:{name}") for name in names]
    return sum(info["waiters"] for info in infos if info is not None)


def mode(client: redis.Redis, name: str) -> Any:
    info = fencelock.lock_info(client, f"lock:{name}")
    return None if info is None else info["mode"]


# ---------------------------------------------------------------------------------
# Lost together
# ---------------------------------------------------------------------------------


CHILD = r"""
import contextlib, sys, time
import redis, fencelock

port, count, ttl = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
delay = sys.argv[4]
locks = fencelock.Locks(
    redis.Redis(port=port), lock_delay=None if delay == "-" else float(delay)
)
lost = []
with contextlib.ExitStack() as stack:
    for i in range(count):
        stack.enter_context(locks.lock(
            f"child:{i}", ttl=ttl, lost_ok=True,
            on_lost=lambda lease: lost.append(lease.lost_reason),
        ))
    print("ready", flush=True)
    sys.stdin.readline()
    until = time.monotonic() + 2  # woken from a pause: the refresher reports soon
    while len(lost) < count and time.monotonic() < until:
        time.sleep(0.01)
    print("lost", len(lost), ",".join(sorted(set(lost))), flush=True)
"""


@contextlib.contextmanager
def child_holding(
    port: int, count: int, ttl: float, lock_delay: str = "-"
) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``child:0`` .. ``child:<count-1>`` in a session."""
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(port), str(count), str(ttl), lock_delay],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()


def grants_after(url: str, names: list[str], wait: float) -> Callable[[], list[float]]:
    """Waiters of another manager, queued now (in a thread of their own): when each
    was granted (monotonic), once ``collect()`` is called."""
    granted: list[float] = []

    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)

        async def one(name: str) -> None:
            await locks.acquire(name, ttl=5, wait=wait)
            granted.append(time.monotonic())

        try:
            await asyncio.gather(*(one(name) for name in names))
        finally:
            await client.aclose()

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()

    def collect() -> list[float]:
        thread.join(wait + 5)
        return granted

    return collect


def test_a_killed_holder_frees_every_lock_within_its_ttl(
    server: Server, r: redis.Redis
) -> None:
    """50 locks of a process kept alive by its keepalives alone for four ttls, then
    the process killed: every waiter is granted its lock within the ttl after the
    last keepalive."""
    ttl, count = 0.4, 50
    with child_holding(server.port, count, ttl) as child:
        names = [f"child:{i}" for i in range(count)]
        collect = grants_after(server.url, names, wait=5)
        wait_until(lambda: waiting(r, names) == count, 5, "every waiter queued")
        time.sleep(4 * ttl)
        infos = [fencelock.lock_info(r, f"lock:{name}") for name in names]
        assert all(info and info["held"] and info["in_session"] == 1 for info in infos)
        child.kill()
        killed = time.monotonic()
        granted = collect()
    assert len(granted) == count
    assert max(granted) - killed <= ttl + 0.3


def test_a_paused_holder_is_not_overlapped_for_the_lock_delay(
    server: Server, r: redis.Redis
) -> None:
    """A holder stopped (SIGSTOP: a GC pause, a frozen VM) loses its lease a ttl after
    its last keepalive; with ``lock_delay`` nobody gets the lock for that much longer,
    then the waiter is served. Woken, the holder reports the lease lost."""
    ttl, delay = 0.3, 0.8
    with child_holding(server.port, 1, ttl, lock_delay=str(delay)) as child:
        collect = grants_after(server.url, ["child:0"], wait=5)
        wait_until(lambda: waiting(r, ["child:0"]) == 1, 5, "the waiter queued")
        time.sleep(2 * ttl)
        child.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            wait_until(lambda: mode(r, "child:0") == "quarantined", 2, "quarantine")
            seen = time.monotonic()
            info = fencelock.lock_info(r, "lock:child:0")
            (granted,) = collect()
        finally:
            child.send_signal(signal.SIGCONT)
        assert info is not None and not info["held"] and info["fence"] is None
        left = (info["ttl_ms"] or 0) / 1000
        assert 0 < left <= delay
        assert seen - stopped <= ttl + 0.2, "the lease ran out a ttl after the pause"
        # Nobody had it for the rest of the quarantine; the waiter right after.
        assert seen + left - 0.02 <= granted <= seen + left + 0.25
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["lost", "1", "deadline"]


# ---------------------------------------------------------------------------------
# close()
# ---------------------------------------------------------------------------------


def test_close_releases_every_lock_and_the_waiters_get_them(r: redis.Redis) -> None:
    locks, others = Locks(r), Locks(r)
    acquired = [locks.acquire(f"c{i}", ttl=30, session=True) for i in range(19)]
    in_block: list[Lease] = []
    left_with: list[BaseException] = []
    entered, closed = threading.Event(), threading.Event()

    def block() -> None:
        try:
            with locks.lock("c19", ttl=30, on_lost=in_block.append) as lease:
                entered.set()
                closed.wait(5)
                assert lease.lost.is_set()
        except BaseException as error:
            left_with.append(error)

    blocker = threading.Thread(target=block)
    blocker.start()
    assert entered.wait(5)
    theirs = others.acquire("theirs", ttl=30)
    own_wait: list[BaseException] = []

    def own_waiter() -> None:  # a waiting acquire of the session: answered nil
        try:
            locks.acquire("theirs", ttl=30, wait=5, session=True)
        except BaseException as error:
            own_wait.append(error)

    waiter = threading.Thread(target=own_waiter)
    waiter.start()
    names = [f"c{i}" for i in range(20)]
    granted: dict[str, float] = {}

    def wait_for(name: str) -> None:
        others.acquire(name, ttl=30, wait=5)
        granted[name] = time.monotonic()

    waiters = [threading.Thread(target=wait_for, args=(name,)) for name in names]
    for thread in waiters:
        thread.start()
    wait_until(
        lambda: waiting(r, names) == 20 and waiting(r, ["theirs"]) == 1,
        5,
        "the waiters queued",
    )
    counts = Counts(r)
    start = time.monotonic()
    locks.close()
    closed.set()
    for thread in [*waiters, waiter, blocker]:
        thread.join(5)
    assert counts["lock.close"] == 1
    assert sorted(granted) == sorted(names)
    assert max(granted.values()) - start < 0.2
    assert all(lease.released and lease.lost_reason == "closed" for lease in acquired)
    assert [lease.key for lease in in_block] == ["lock:c19"]
    assert len(left_with) == 1 and isinstance(left_with[0], LockLost)
    assert left_with[0].reason == LockLost.CLOSED
    assert len(own_wait) == 1 and isinstance(own_wait[0], LockNotAcquired)
    assert holds(r, theirs)
    # The manager goes on, in a new session.
    with locks.lock("again", ttl=30) as again:
        assert again.session is not None and again.session != acquired[0].session
        assert holds(r, again)
