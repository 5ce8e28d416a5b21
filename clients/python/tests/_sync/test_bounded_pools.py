# Generated from tests/_async/test_bounded_pools.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
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
import redis
from monitor import Monitor
from servers import Server

import fencelock

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


def waiters(r: redis.Redis, key: str) -> int:
    info = fencelock.lock_info(r, key)
    return 0 if info is None else info["waiters"]


def blocked_waits(client: redis.Redis) -> int:
    """How many of the server's clients are blocked in ``LOCK.ACQUIRE``."""
    return sum(
        1
        for entry in client.client_list()
        if entry.get("cmd") == "lock.acquire" and "b" in entry.get("flags", "")
    )


def a_lock(
    client: redis.Redis,
    locks: fencelock.Locks,
    way: str,
    name: str,
    wait: float,
) -> Any:
    """The lock ``name`` taken the trial's way: wait up to ``wait``, a 10 s lease."""
    if way == "drop-in":
        return drop_in(client, name, timeout=10, blocking_timeout=wait)
    return locks.lock(name, ttl=10, wait=wait)


def queue_in_order(r: redis.Redis, key: str, count: int, start: Any) -> list[Any]:
    """Starts waiter 0, 1, …, each once the one before is queued (arrival order)."""
    started = []
    for position in range(count):
        started.append(spawn(functools.partial(start, position)))

        def queued(p: int = position) -> bool:
            return waiters(r, key) == p + 1

        until(queued, 5, "queued")
    return started


@pytest.mark.parametrize("way", WAYS)
def test_six_waiters_through_a_blocking_pool_of_two(
    server: Server, r: redis.Redis, way: str
) -> None:
    pool = redis.BlockingConnectionPool(
        port=server.port, max_connections=2, timeout=POOL_TIMEOUT
    )
    client = redis.Redis(connection_pool=pool)
    locks = fencelock.Locks(client)
    holders = Holders()

    def worker(n: int) -> None:
        try:
            with a_lock(client, locks, way, "bp", 30):
                with holders.holding():
                    # By now the others wait, on whatever connections they took.
                    sleep(0.05)
                    client.incr("count")
            holders.done.append(n)
        except BaseException as error:
            holders.failures.append(error)

    start = time.monotonic()
    started = [spawn(functools.partial(worker, n)) for n in range(WORKERS)]
    for task, _ in started:
        join(task, POOL_TIMEOUT + 15)
    took = time.monotonic() - start
    client.close()
    # Given explicitly, the pool is not closed with the client on redis-py 5.
    pool.disconnect()
    assert not holders.failures, holders.failures
    assert sorted(holders.done) == list(range(WORKERS))
    assert holders.most == 1, "one holder at a time"
    assert int(r.get("count") or 0) == WORKERS
    assert took < WITHIN, f"took {took:.1f} s"


@pytest.mark.parametrize("way", WAYS)
def test_two_checkouts_through_a_pool_of_one_connection(
    server: Server, r: redis.Redis, way: str
) -> None:
    pool = redis.BlockingConnectionPool(
        port=server.port, max_connections=1, timeout=POOL_TIMEOUT
    )
    client = redis.Redis(connection_pool=pool)
    locks = fencelock.Locks(client)
    holders = Holders()
    took: list[float] = []

    def request() -> None:
        """A checkout of about 0.2 s: read the cart, charge, mark it paid."""
        start = time.monotonic()
        try:
            with a_lock(client, locks, way, "order:7", 5):
                with holders.holding():
                    client.get("cart:7")
                    sleep(0.1)
                    client.incr("charged:7")
                    sleep(0.1)
                    client.set("paid:7", 1)
            took.append(time.monotonic() - start)
        except BaseException as error:
            holders.failures.append(error)

    started = [spawn(request) for _ in range(2)]
    for task, _ in started:
        join(task, POOL_TIMEOUT + 15)
    client.close()
    pool.disconnect()
    assert not holders.failures, holders.failures
    assert len(took) == 2
    assert holders.most == 1, "one holder at a time"
    # The first about 0.2 s, the second that plus its own 0.2 s and one try's pause.
    assert max(took) < 1.5, took
    assert int(r.get("charged:7") or 0) == 2


@pytest.mark.parametrize("way", WAYS)
def test_a_bounded_pool_with_room_keeps_the_fifo_queue(
    server: Server, r: redis.Redis, way: str
) -> None:
    """4 waiters and the holder through a pool of 5: the fourth waiter still leaves one
    connection free, so each waits in the server's queue (one ``LOCK.ACQUIRE`` each,
    served in arrival order) and the holder releases on the fifth."""
    pool = redis.BlockingConnectionPool(
        port=server.port, max_connections=5, timeout=POOL_TIMEOUT
    )
    client = redis.Redis(connection_pool=pool)
    locks = fencelock.Locks(client)
    key = "queue" if way == "drop-in" else "lock:queue"
    monitor = Monitor(server.port)
    holder = a_lock(client, locks, way, "queue", 0)
    holder.__enter__()
    order: list[int] = []

    def wait_and_hold(position: int) -> None:
        with a_lock(client, locks, way, "queue", 10):
            order.append(position)
            sleep(0.05)

    started = queue_in_order(r, key, 4, wait_and_hold)
    sleep(0.3)  # pollers would show up now
    assert blocked_waits(r) == 4
    holder.__exit__(None, None, None)
    for task, outcome in started:
        join(task, 10)
        assert "error" not in outcome, outcome
    lines = monitor.stop()
    client.close()
    pool.disconnect()
    assert order == [0, 1, 2, 3]
    assert monitor.count(lines, "LOCK.ACQUIRE") == 5, "the holder's, one per waiter"


def plain_acquires(lines: list[str]) -> list[str]:
    """The ``LOCK.ACQUIRE`` lines of MONITOR that did not wait (no ``BLOCK``)."""
    return [
        line for line in lines if '"lock.acquire"' in line and '"block"' not in line
    ]


def test_the_waiter_that_would_take_the_last_connection_tries_instead(
    server: Server, r: redis.Redis
) -> None:
    """Pool of 2, the lock held elsewhere: the first waiter takes a connection and
    waits in the queue (one was left), the second would take the last one, so it tries
    every ``sleep`` seconds, each try a round trip; it still gives up on time."""
    pool = redis.BlockingConnectionPool(
        port=server.port, max_connections=2, timeout=POOL_TIMEOUT
    )
    client = redis.Redis(connection_pool=pool)
    holder = drop_in(r, "last", timeout=30, thread_local=False)
    assert holder.acquire(blocking=False)
    first, first_outcome = spawn(
        drop_in(client, "last", timeout=30, blocking_timeout=10).acquire
    )

    def first_queued() -> bool:
        return waiters(r, "last") == 1

    until(first_queued, 5, "the first waiter queued")
    monitor = Monitor(server.port)
    second = drop_in(client, "last", timeout=30, blocking_timeout=1, sleep=0.2)
    start = time.monotonic()
    assert not second.acquire()
    waited = time.monotonic() - start
    lines = monitor.stop()
    assert 0.9 < waited < 1.6, f"{waited:.2f} s for a 1 s blocking_timeout"
    assert 4 <= len(plain_acquires(lines)) <= 7, lines
    assert blocked_waits(r) == 1, "only the first waits in the queue"
    # Meanwhile the pool served anyone else at once.
    assert client.ping()
    holder.release()
    join(first, 5)
    assert first_outcome == {"result": True}
    client.close()
    pool.disconnect()


def test_a_non_blocking_pool_keeps_a_connection_for_the_holder(
    server: Server, r: redis.Redis
) -> None:
    """``ConnectionPool(max_connections=2)`` raises "Too many connections" instead of
    waiting for one: the holder and two waiters share it; the second waiter gives the
    last connection back after each try, so the holder's commands and its release get
    it, and both waiters get the lock in turn."""
    pool = redis.ConnectionPool(port=server.port, max_connections=2)
    client = redis.Redis(connection_pool=pool)
    holder = drop_in(client, "nb", timeout=30)
    assert holder.acquire(blocking=False)
    got: list[str] = []

    def waiter(name: str, sleep: float) -> None:
        lock = drop_in(client, "nb", timeout=30, blocking_timeout=10, sleep=sleep)
        with lock:
            got.append(name)

    monitor = Monitor(server.port)
    first, first_outcome = spawn(functools.partial(waiter, "first", 0.1))

    def first_queued() -> bool:
        return waiters(r, "nb") == 1

    until(first_queued, 5, "the first waiter queued")
    # The second tries every 2 s: right after a try, the last connection is free
    # for that long, so what the holder does next cannot meet a try in flight.
    second, second_outcome = spawn(functools.partial(waiter, "second", 2.0))

    def second_tried() -> bool:
        return len(plain_acquires(monitor.lines())) >= 1

    until(second_tried, 5, "the second's try")
    sleep(0.05)
    assert client.incr("work") == 1
    holder.release()
    join(first, 5)
    join(second, 5)
    monitor.stop()
    client.close()
    pool.disconnect()
    failures = [o["error"] for o in (first_outcome, second_outcome) if "error" in o]
    assert not failures, failures
    assert got == ["first", "second"]


def test_a_pool_with_no_connection_to_give_is_not_blamed_on_the_server(
    server: Server, r: redis.Redis
) -> None:
    """A ``ConnectionPool(max_connections=1)`` whose one connection is busy (a long
    command of the application's own): an acquire raises at once, as any command of
    that pool would, as ``ServerUnavailable`` (a ``ConnectionError``) whose message
    puts it on the pool, not on the server, which was never asked."""
    pool = redis.ConnectionPool(port=server.port, max_connections=1)
    client = redis.Redis(connection_pool=pool)
    other, _ = spawn(functools.partial(client.blpop, ["never"], 2))

    def long_command_running() -> bool:
        return any(entry.get("cmd") == "blpop" for entry in r.client_list())

    until(long_command_running, 5, "the long command")
    attempts = {
        "drop-in": lambda: drop_in(
            client, "k", timeout=5, blocking_timeout=1
        ).acquire(),
        "locks": lambda: fencelock.Locks(client).acquire("k", ttl=5, wait=1),
    }
    for way, attempt in attempts.items():
        start = time.monotonic()
        with pytest.raises(fencelock.ServerUnavailable) as raised:
            attempt()
        assert time.monotonic() - start < 0.5, way
        assert isinstance(raised.value, redis.ConnectionError)
        text = str(raised.value)
        assert "connection pool had no connection" in text, text
        assert "no answer from" not in text, text
    join(other, 5)
    client.close()
    pool.disconnect()
    assert r.exists("k") == 0
