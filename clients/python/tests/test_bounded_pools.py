"""A bounded pool smaller than the number of waiters, where each side has its own
test: the waiter that would take the pool's last connection tries every ``sleep``
seconds instead of waiting in the server's queue, each try on a connection borrowed
for one round trip, and still ends within its ``blocking_timeout``; a
``ConnectionPool(max_connections=n)``, which raises instead of waiting: the waiters
leave the holder a connection there too, and an acquire that finds it exhausted raises
``ServerUnavailable`` at once, blaming the pool, not the server. Waiters through a
blocking pool of two or one, and the FIFO queue where the pool has room, are
tests/_async/test_bounded_pools.py (the sync side generated from it)."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from monitor import Monitor
from servers import Server, wait_until
from setups import blocked_waits

import fencelock

# The trial's pool timeout: the old wedge lasted exactly this long.
POOL_TIMEOUT = 20


def waiters(r: redis.Redis, key: str) -> int:
    info = fencelock.lock_info(r, key)
    return 0 if info is None else info["waiters"]


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
