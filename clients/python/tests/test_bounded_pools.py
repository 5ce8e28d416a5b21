"""A bounded pool smaller than the number of waiters: a wait must never take the
pool's last connection for a long server-side wait, or the holder's own commands (its
work under the lock, the drop-in's release) find no connection, the holder waits for
the waiters and they for it until the pool's timeout.

- 6 threads (tasks) through a ``BlockingConnectionPool(max_connections=2)``, each
  taking the lock and running a command under it: all 6 finish at once, one holder at
  a time (the drop-in, ``Locks``; sync and asyncio).
- 2 checkouts through a pool of one connection: both finish at once.
- Where the pool has room, waits are still the server's FIFO queue, one
  ``LOCK.ACQUIRE`` each; the waiter that would take the last connection tries every
  ``sleep`` seconds instead, each try on a connection borrowed for one round trip, and
  still ends within its ``blocking_timeout``.
- A ``ConnectionPool(max_connections=n)``, which raises instead of waiting: the
  waiters leave the holder a connection there too, and an acquire that finds it
  exhausted raises ``ServerUnavailable`` at once, blaming the pool, not the server."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import pytest
import redis
import redis.asyncio
from conftest import run
from monitor import Monitor
from servers import Server, wait_until
from setups import blocked_waits

import fencelock
import fencelock.asyncio

WAYS = ["drop-in", "locks"]
THREADS = 6
# The trial's pool timeout: the old wedge lasted exactly this long.
POOL_TIMEOUT = 20
# All 6 must be done well within it (redis-py's own polling lock takes about 0.8 s).
WITHIN = 5.0


class Holders:
    """Counts who is inside the lock at once, across threads (or tasks)."""

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


def sync_lock(client: redis.Redis, locks: fencelock.Locks, way: str, name: str) -> Any:
    """The lock ``name`` taken the trial's way: wait up to 30 s, a 10 s lease."""
    if way == "drop-in":
        return client.lock(
            name, timeout=10, blocking_timeout=30, lock_class=fencelock.Lock
        )
    return locks.lock(name, ttl=10, wait=30)


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
            with sync_lock(client, locks, way, "bp"), holders.holding():
                # By now the others wait, on whatever connections they took.
                time.sleep(0.05)
                client.incr("count")
            holders.done.append(n)
        except BaseException as error:
            holders.failures.append(error)

    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(POOL_TIMEOUT + 15)
    took = time.monotonic() - start
    client.close()
    pool.disconnect()
    assert not holders.failures, holders.failures
    assert sorted(holders.done) == list(range(THREADS))
    assert holders.most == 1, "one holder at a time"
    assert int(r.get("count") or 0) == THREADS
    assert took < WITHIN, f"took {took:.1f} s"


def async_lock(
    client: redis.asyncio.Redis, locks: fencelock.asyncio.Locks, way: str, name: str
) -> Any:
    if way == "drop-in":
        return client.lock(
            name, timeout=10, blocking_timeout=30, lock_class=fencelock.asyncio.Lock
        )
    return locks.lock(name, ttl=10, wait=30)


@pytest.mark.parametrize("way", WAYS)
def test_asyncio_six_waiters_through_a_blocking_pool_of_two(
    server: Server, r: redis.Redis, way: str
) -> None:
    holders = Holders()

    async def main() -> float:
        pool = redis.asyncio.BlockingConnectionPool(
            port=server.port, max_connections=2, timeout=POOL_TIMEOUT
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        locks = fencelock.asyncio.Locks(client)

        async def worker(n: int) -> None:
            try:
                async with async_lock(client, locks, way, "bp"):
                    with holders.holding():
                        await asyncio.sleep(0.05)
                        await client.incr("count")
                holders.done.append(n)
            except BaseException as error:
                holders.failures.append(error)

        start = time.monotonic()
        await asyncio.gather(*(worker(n) for n in range(THREADS)))
        took = time.monotonic() - start
        await client.aclose()
        # Given explicitly, the pool is not closed with the client on redis-py 5.
        await pool.disconnect()
        return took

    took = run(main())
    assert not holders.failures, holders.failures
    assert sorted(holders.done) == list(range(THREADS))
    assert holders.most == 1, "one holder at a time"
    assert int(r.get("count") or 0) == THREADS
    assert took < WITHIN, f"took {took:.1f} s"


def checkout(client: redis.Redis, lock: Any, order: str, holders: Holders) -> None:
    """A checkout of about 0.2 s: read the cart, charge, mark it paid."""
    with lock, holders.holding():
        client.get(f"cart:{order}")
        time.sleep(0.1)
        client.incr(f"charged:{order}")
        time.sleep(0.1)
        client.set(f"paid:{order}", 1)


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
        start = time.monotonic()
        try:
            if way == "drop-in":
                lock = client.lock(
                    "order:7", timeout=10, blocking_timeout=5, lock_class=fencelock.Lock
                )
            else:
                lock = locks.lock("order:7", ttl=10, wait=5)
            checkout(client, lock, "7", holders)
            took.append(time.monotonic() - start)
        except BaseException as error:
            holders.failures.append(error)

    threads = [threading.Thread(target=request) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(POOL_TIMEOUT + 15)
    client.close()
    pool.disconnect()
    assert not holders.failures, holders.failures
    assert len(took) == 2
    assert holders.most == 1, "one holder at a time"
    # The first about 0.2 s, the second that plus its own 0.2 s and one try's pause.
    assert max(took) < 1.5, took
    assert int(r.get("charged:7") or 0) == 2


@pytest.mark.parametrize("way", WAYS)
def test_asyncio_two_checkouts_through_a_pool_of_one_connection(
    server: Server, r: redis.Redis, way: str
) -> None:
    async def main() -> list[float]:
        pool = redis.asyncio.BlockingConnectionPool(
            port=server.port, max_connections=1, timeout=POOL_TIMEOUT
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        locks = fencelock.asyncio.Locks(client)

        async def request() -> float:
            start = time.monotonic()
            lock: Any
            if way == "drop-in":
                lock = client.lock(
                    "order:7",
                    timeout=10,
                    blocking_timeout=5,
                    lock_class=fencelock.asyncio.Lock,
                )
            else:
                lock = locks.lock("order:7", ttl=10, wait=5)
            async with lock:
                await client.get("cart:7")
                await asyncio.sleep(0.1)
                await client.incr("charged:7")
                await asyncio.sleep(0.1)
                await client.set("paid:7", 1)
            return time.monotonic() - start

        took = await asyncio.gather(request(), request())
        await client.aclose()
        # Given explicitly, the pool is not closed with the client on redis-py 5.
        await pool.disconnect()
        return list(took)

    took = run(main())
    assert max(took) < 1.5, took
    assert int(r.get("charged:7") or 0) == 2


def queue_in_order(
    r: redis.Redis, key: str, count: int, start: Callable[[int], None]
) -> None:
    """Starts waiter 0, 1, …, each once the one before is queued (arrival order)."""
    for position in range(count):
        start(position)
        wait_until(lambda p=position: waiters(r, key) == p + 1, 5, "queued")


def test_a_bounded_pool_with_room_keeps_the_fifo_queue(
    server: Server, r: redis.Redis
) -> None:
    """4 waiters and the holder through a pool of 5: the fourth waiter still leaves one
    connection free, so each waits in the server's queue (one ``LOCK.ACQUIRE`` each,
    served in arrival order) and the holder releases on the fifth."""
    pool = redis.BlockingConnectionPool(
        port=server.port, max_connections=5, timeout=POOL_TIMEOUT
    )
    client = redis.Redis(connection_pool=pool)
    holder = client.lock("queue", timeout=30, lock_class=fencelock.Lock)
    assert holder.acquire(blocking=False)
    monitor = Monitor(server.port)
    order: list[int] = []

    def wait_and_hold(position: int) -> None:
        lock = client.lock(
            "queue", timeout=30, blocking_timeout=10, lock_class=fencelock.Lock
        )
        assert lock.acquire()
        order.append(position)
        time.sleep(0.05)
        lock.release()

    threads: list[threading.Thread] = []

    def start(position: int) -> None:
        threads.append(threading.Thread(target=wait_and_hold, args=(position,)))
        threads[-1].start()

    queue_in_order(r, "queue", 4, start)
    time.sleep(0.3)  # pollers would show up now
    assert len(blocked_waits(r)) == 4
    holder.release()
    for thread in threads:
        thread.join(10)
    lines = monitor.stop()
    client.close()
    pool.disconnect()
    assert order == [0, 1, 2, 3]
    assert monitor.count(lines, "LOCK.ACQUIRE") == 4, "one per waiter"


def test_asyncio_a_bounded_pool_with_room_keeps_the_fifo_queue(
    server: Server, r: redis.Redis
) -> None:
    async def main() -> list[int]:
        pool = redis.asyncio.BlockingConnectionPool(
            port=server.port, max_connections=5, timeout=POOL_TIMEOUT
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        locks = fencelock.asyncio.Locks(client)
        holder = await locks.acquire("queue", ttl=30)
        order: list[int] = []

        async def wait_and_hold(position: int) -> None:
            async with locks.lock("queue", ttl=30, wait=10):
                order.append(position)
                await asyncio.sleep(0.05)

        tasks = []
        for position in range(4):
            tasks.append(asyncio.ensure_future(wait_and_hold(position)))
            deadline = time.monotonic() + 5
            while waiters(r, "lock:queue") < position + 1:
                assert time.monotonic() < deadline, "queued"
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert len(blocked_waits(r)) == 4
        await locks.release(holder)
        await asyncio.gather(*tasks)
        await client.aclose()
        # Given explicitly, the pool is not closed with the client on redis-py 5.
        await pool.disconnect()
        return order

    monitor = Monitor(server.port)
    order = run(main())
    lines = monitor.stop()
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
    holder = r.lock("last", timeout=30, lock_class=fencelock.Lock, thread_local=False)
    assert holder.acquire(blocking=False)
    first_result: list[bool] = []
    first = threading.Thread(
        target=lambda: first_result.append(
            client.lock(
                "last", timeout=30, blocking_timeout=10, lock_class=fencelock.Lock
            ).acquire()
        )
    )
    first.start()
    wait_until(lambda: waiters(r, "last") == 1, 5, "the first waiter queued")
    monitor = Monitor(server.port)
    second = client.lock(
        "last", timeout=30, blocking_timeout=1, sleep=0.2, lock_class=fencelock.Lock
    )
    start = time.monotonic()
    assert not second.acquire()
    waited = time.monotonic() - start
    lines = monitor.stop()
    assert 0.9 < waited < 1.6, f"{waited:.2f} s for a 1 s blocking_timeout"
    assert 4 <= len(plain_acquires(lines)) <= 7, lines
    assert len(blocked_waits(r)) == 1, "only the first waits in the queue"
    # Meanwhile the pool served anyone else at once.
    assert client.ping()
    holder.release()
    first.join(5)
    assert first_result == [True]
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
    holder = client.lock("nb", timeout=30, lock_class=fencelock.Lock)
    assert holder.acquire(blocking=False)
    got: list[str] = []
    failures: list[BaseException] = []

    def waiter(name: str, sleep: float) -> None:
        try:
            lock = client.lock(
                "nb",
                timeout=30,
                blocking_timeout=10,
                sleep=sleep,
                lock_class=fencelock.Lock,
            )
            with lock:
                got.append(name)
        except BaseException as error:
            failures.append(error)

    monitor = Monitor(server.port)
    first = threading.Thread(target=waiter, args=("first", 0.1))
    first.start()
    wait_until(lambda: waiters(r, "nb") == 1, 5, "the first waiter queued")
    # The second tries every 2 s: right after a try, the last connection is free
    # for that long, so what the holder does next cannot meet a try in flight.
    second = threading.Thread(target=waiter, args=("second", 2.0))
    second.start()
    wait_until(lambda: len(plain_acquires(monitor.lines())) >= 1, 5, "the second's try")
    time.sleep(0.05)
    assert client.incr("work") == 1
    holder.release()
    first.join(5)
    second.join(5)
    monitor.stop()
    client.close()
    pool.disconnect()
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
    other = threading.Thread(target=client.blpop, args=(["never"], 2))
    other.start()
    wait_until(
        lambda: any(entry.get("cmd") == "blpop" for entry in r.client_list()),
        5,
        "the long command",
    )
    attempts = {
        "drop-in": lambda: client.lock(
            "k", timeout=5, blocking_timeout=1, lock_class=fencelock.Lock
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
    other.join(5)
    client.close()
    pool.disconnect()
    assert r.exists("k") == 0
