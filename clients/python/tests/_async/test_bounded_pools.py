"""A bounded pool smaller than the number of waiters, on both sides: a wait must
never take the pool's last connection for a long server-side wait, or the holder's
own commands (its work under the lock, the drop-in's release) find no connection, the
holder waits for the waiters and they for it until the pool's timeout.

- 6 tasks (threads) through a ``BlockingConnectionPool(max_connections=2)``, each
  taking the lock and running a command under it: all 6 finish at once, one holder at
  a time (the drop-in, ``Locks``).
- 2 checkouts through a pool of one connection: both finish at once.
- Where the pool has room, waits are still the server's FIFO queue, one
  ``LOCK.ACQUIRE`` each (the drop-in, ``Locks``).
- The waiter that would take the pool's last connection tries every ``sleep``
  seconds instead of waiting in the server's queue, each try on a connection
  borrowed for one round trip, and still ends within its ``blocking_timeout``.
- A ``ConnectionPool(max_connections=n)``, which raises instead of waiting: the
  waiters leave the holder a connection there too, and an acquire that finds it
  exhausted raises ``ServerUnavailable`` at once, blaming the pool, not the server."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio
from monitor import Monitor
from servers import Server

import fencelock.asyncio

from .helpers import drop_in, join, sleep, spawn, until

WAYS = ["drop-in", "locks"]
WORKERS = 6
# The trial's pool timeout: the old wedge lasted exactly this long.
POOL_TIMEOUT = 20
# All 6 must be done well within it (redis-py's own polling lock takes about 0.8 s).
WITHIN = 5.0


class Holders:
    """Counts who is inside the lock at once, across tasks (or threads)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self.inside = 0
        self.most = 0
        self.done: list[int] = []
        self.failures: list[BaseException] = []

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        with self._guard:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            yield
        finally:
            with self._guard:
                self.inside -= 1


async def waiters(r: redis.asyncio.Redis, key: str) -> int:
    info = await fencelock.asyncio.lock_info(r, key)
    return 0 if info is None else info["waiters"]


async def blocked_waits(client: redis.asyncio.Redis) -> int:
    """How many of the server's clients are blocked in ``LOCK.ACQUIRE``."""
    return sum(
        1
        for entry in await client.client_list()
        if entry.get("cmd") == "lock.acquire" and "b" in entry.get("flags", "")
    )


def a_lock(
    client: redis.asyncio.Redis,
    locks: fencelock.asyncio.Locks,
    way: str,
    name: str,
    wait: float,
) -> Any:
    """The lock ``name`` taken the trial's way: wait up to ``wait``, a 10 s lease."""
    if way == "drop-in":
        return drop_in(client, name, timeout=10, blocking_timeout=wait)
    return locks.lock(name, ttl=10, wait=wait)


async def queue_in_order(
    r: redis.asyncio.Redis, key: str, count: int, start: Any
) -> list[Any]:
    """Starts waiter 0, 1, …, each once the one before is queued (arrival order)."""
    started = []
    for position in range(count):
        started.append(spawn(functools.partial(start, position)))

        async def queued(p: int = position) -> bool:
            return await waiters(r, key) == p + 1

        await until(queued, 5, "queued")
    return started


@pytest.mark.parametrize("way", WAYS)
async def test_six_waiters_through_a_blocking_pool_of_two(
    server: Server, r: redis.asyncio.Redis, way: str
) -> None:
    pool = redis.asyncio.BlockingConnectionPool(
        port=server.port, max_connections=2, timeout=POOL_TIMEOUT
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    locks = fencelock.asyncio.Locks(client)
    holders = Holders()

    async def worker(n: int) -> None:
        try:
            async with a_lock(client, locks, way, "bp", 30):
                with holders.holding():
                    # By now the others wait, on whatever connections they took.
                    await sleep(0.05)
                    await client.incr("count")
            holders.done.append(n)
        except BaseException as error:
            holders.failures.append(error)

    start = time.monotonic()
    started = [spawn(functools.partial(worker, n)) for n in range(WORKERS)]
    for task, _ in started:
        await join(task, POOL_TIMEOUT + 15)
    took = time.monotonic() - start
    await client.aclose()
    # Given explicitly, the pool is not closed with the client on redis-py 5.
    await pool.disconnect()
    assert not holders.failures, holders.failures
    assert sorted(holders.done) == list(range(WORKERS))
    assert holders.most == 1, "one holder at a time"
    assert int(await r.get("count") or 0) == WORKERS
    assert took < WITHIN, f"took {took:.1f} s"


@pytest.mark.parametrize("way", WAYS)
async def test_two_checkouts_through_a_pool_of_one_connection(
    server: Server, r: redis.asyncio.Redis, way: str
) -> None:
    pool = redis.asyncio.BlockingConnectionPool(
        port=server.port, max_connections=1, timeout=POOL_TIMEOUT
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    locks = fencelock.asyncio.Locks(client)
    holders = Holders()
    took: list[float] = []

    async def request() -> None:
        """A checkout of about 0.2 s: read the cart, charge, mark it paid."""
        start = time.monotonic()
        try:
            async with a_lock(client, locks, way, "order:7", 5):
                with holders.holding():
                    await client.get("cart:7")
                    await sleep(0.1)
                    await client.incr("charged:7")
                    await sleep(0.1)
                    await client.set("paid:7", 1)
            took.append(time.monotonic() - start)
        except BaseException as error:
            holders.failures.append(error)

    started = [spawn(request) for _ in range(2)]
    for task, _ in started:
        await join(task, POOL_TIMEOUT + 15)
    await client.aclose()
    await pool.disconnect()
    assert not holders.failures, holders.failures
    assert len(took) == 2
    assert holders.most == 1, "one holder at a time"
    # The first about 0.2 s, the second that plus its own 0.2 s and one try's pause.
    assert max(took) < 1.5, took
    assert int(await r.get("charged:7") or 0) == 2


@pytest.mark.parametrize("way", WAYS)
async def test_a_bounded_pool_with_room_keeps_the_fifo_queue(
    server: Server, r: redis.asyncio.Redis, way: str
) -> None:
    """4 waiters and the holder through a pool of 5: the fourth waiter still leaves one
    connection free, so each waits in the server's queue (one ``LOCK.ACQUIRE`` each,
    served in arrival order) and the holder releases on the fifth."""
    pool = redis.asyncio.BlockingConnectionPool(
        port=server.port, max_connections=5, timeout=POOL_TIMEOUT
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    locks = fencelock.asyncio.Locks(client)
    key = "queue" if way == "drop-in" else "lock:queue"
    monitor = Monitor(server.port)
    holder = a_lock(client, locks, way, "queue", 0)
    await holder.__aenter__()
    order: list[int] = []

    async def wait_and_hold(position: int) -> None:
        async with a_lock(client, locks, way, "queue", 10):
            order.append(position)
            await sleep(0.05)

    started = await queue_in_order(r, key, 4, wait_and_hold)
    await sleep(0.3)  # pollers would show up now
    assert await blocked_waits(r) == 4
    await holder.__aexit__(None, None, None)
    for task, outcome in started:
        await join(task, 10)
        assert "error" not in outcome, outcome
    lines = monitor.stop()
    await client.aclose()
    await pool.disconnect()
    assert order == [0, 1, 2, 3]
    assert monitor.count(lines, "LOCK.ACQUIRE") == 5, "the holder's, one per waiter"


def plain_acquires(lines: list[str]) -> list[str]:
    """The ``LOCK.ACQUIRE`` lines of MONITOR that did not wait (no ``BLOCK``)."""
    return [
        line for line in lines if '"lock.acquire"' in line and '"block"' not in line
    ]


async def test_the_waiter_that_would_take_the_last_connection_tries_instead(
    server: Server, r: redis.asyncio.Redis
) -> None:
    """Pool of 2, the lock held elsewhere: the first waiter takes a connection and
    waits in the queue (one was left), the second would take the last one, so it tries
    every ``sleep`` seconds, each try a round trip; it still gives up on time."""
    pool = redis.asyncio.BlockingConnectionPool(
        port=server.port, max_connections=2, timeout=POOL_TIMEOUT
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    holder = drop_in(r, "last", timeout=30, thread_local=False)
    assert await holder.acquire(blocking=False)
    first, first_outcome = spawn(
        drop_in(client, "last", timeout=30, blocking_timeout=10).acquire
    )

    async def first_queued() -> bool:
        return await waiters(r, "last") == 1

    await until(first_queued, 5, "the first waiter queued")
    monitor = Monitor(server.port)
    second = drop_in(client, "last", timeout=30, blocking_timeout=1, sleep=0.2)
    start = time.monotonic()
    assert not await second.acquire()
    waited = time.monotonic() - start
    lines = monitor.stop()
    assert 0.9 < waited < 1.6, f"{waited:.2f} s for a 1 s blocking_timeout"
    assert 4 <= len(plain_acquires(lines)) <= 7, lines
    assert await blocked_waits(r) == 1, "only the first waits in the queue"
    # Meanwhile the pool served anyone else at once.
    assert await client.ping()
    await holder.release()
    await join(first, 5)
    assert first_outcome == {"result": True}
    await client.aclose()
    await pool.disconnect()


async def test_a_non_blocking_pool_keeps_a_connection_for_the_holder(
    server: Server, r: redis.asyncio.Redis
) -> None:
    """``ConnectionPool(max_connections=2)`` raises "Too many connections" instead of
    waiting for one: the holder and two waiters share it; the second waiter gives the
    last connection back after each try, so the holder's commands and its release get
    it, and both waiters get the lock in turn."""
    pool = redis.asyncio.ConnectionPool(port=server.port, max_connections=2)
    client = redis.asyncio.Redis(connection_pool=pool)
    holder = drop_in(client, "nb", timeout=30)
    assert await holder.acquire(blocking=False)
    got: list[str] = []

    async def waiter(name: str, sleep: float) -> None:
        lock = drop_in(client, "nb", timeout=30, blocking_timeout=10, sleep=sleep)
        async with lock:
            got.append(name)

    monitor = Monitor(server.port)
    first, first_outcome = spawn(functools.partial(waiter, "first", 0.1))

    async def first_queued() -> bool:
        return await waiters(r, "nb") == 1

    await until(first_queued, 5, "the first waiter queued")
    # The second tries every 2 s: right after a try, the last connection is free
    # for that long, so what the holder does next cannot meet a try in flight.
    second, second_outcome = spawn(functools.partial(waiter, "second", 2.0))

    async def second_tried() -> bool:
        return len(plain_acquires(monitor.lines())) >= 1

    await until(second_tried, 5, "the second's try")
    await sleep(0.05)
    assert await client.incr("work") == 1
    await holder.release()
    await join(first, 5)
    await join(second, 5)
    monitor.stop()
    await client.aclose()
    await pool.disconnect()
    failures = [o["error"] for o in (first_outcome, second_outcome) if "error" in o]
    assert not failures, failures
    assert got == ["first", "second"]


async def test_a_pool_with_no_connection_to_give_is_not_blamed_on_the_server(
    server: Server, r: redis.asyncio.Redis
) -> None:
    """A ``ConnectionPool(max_connections=1)`` whose one connection is busy (a long
    command of the application's own): an acquire raises at once, as any command of
    that pool would, as ``ServerUnavailable`` (a ``ConnectionError``) whose message
    puts it on the pool, not on the server, which was never asked."""
    pool = redis.asyncio.ConnectionPool(port=server.port, max_connections=1)
    client = redis.asyncio.Redis(connection_pool=pool)
    other, _ = spawn(functools.partial(client.blpop, ["never"], 2))

    async def long_command_running() -> bool:
        return any(entry.get("cmd") == "blpop" for entry in await r.client_list())

    await until(long_command_running, 5, "the long command")
    attempts = {
        "drop-in": lambda: drop_in(
            client, "k", timeout=5, blocking_timeout=1
        ).acquire(),
        "locks": lambda: fencelock.asyncio.Locks(client).acquire("k", ttl=5, wait=1),
    }
    for way, attempt in attempts.items():
        start = time.monotonic()
        with pytest.raises(fencelock.asyncio.ServerUnavailable) as raised:
            await attempt()
        assert time.monotonic() - start < 0.5, way
        assert isinstance(raised.value, redis.asyncio.ConnectionError)
        text = str(raised.value)
        assert "connection pool had no connection" in text, text
        assert "no answer from" not in text, text
    await join(other, 5)
    await client.aclose()
    await pool.disconnect()
    assert await r.exists("k") == 0
