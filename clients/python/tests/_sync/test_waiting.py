# Generated from tests/_async/test_waiting.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Waiting is the server's: waiters are served in arrival order with one
``LOCK.ACQUIRE`` each (no polling, seen by ``MONITOR``), a wait longer than the
client's socket timeout still ends in a grant, and a grant whose reply is lost is not
orphaned by redis-py's automatic re-send. Each for the drop-in ``Lock`` and for the
manager's leases."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any, Optional

import pytest
import redis
import redis.retry
from monitor import Monitor
from proxy import Proxy
from redis.backoff import NoBackoff
from servers import Server

import fencelock

from .helpers import drop_in, join, later, sleep, spawn, until


def waiters(client: redis.Redis, key: str) -> int:
    info = fencelock.lock_info(client, key)
    return 0 if info is None else info["waiters"]


def until_queued(client: redis.Redis, key: str, count: int) -> None:
    def queued() -> bool:
        return waiters(client, key) == count

    until(queued, 5, "queued")


def test_waiters_are_served_fifo_with_one_acquire_each(
    server: Server, r: redis.Redis
) -> None:
    holder = drop_in(r, "queue", timeout=30, thread_local=False)
    assert holder.acquire(blocking=False)
    monitor = Monitor(server.port)
    order: list[int] = []

    def wait_and_hold(position: int) -> None:
        # redis-py 8's default client (5 s socket timeout), no blocking_timeout.
        client = redis.Redis(port=server.port)
        lock = drop_in(client, "queue", timeout=30)
        assert lock.acquire()
        order.append(position)
        sleep(0.05)
        lock.release()
        client.close()

    started = []
    for position in range(4):
        started.append(spawn(functools.partial(wait_and_hold, position)))
        # Queued before the next one starts: arrival order is known.
        until_queued(r, "queue", position + 1)
    sleep(0.3)  # pollers would show up now
    holder.release()
    for task, outcome in started:
        join(task, 10)
        assert "error" not in outcome, outcome
    lines = monitor.stop()
    assert order == [0, 1, 2, 3]
    assert monitor.count(lines, "LOCK.ACQUIRE") == 4, "one per waiter"


def test_waiters_of_a_manager_are_served_fifo_with_one_acquire_each(
    server: Server, r: redis.Redis
) -> None:
    monitor = Monitor(server.port)
    locks = fencelock.Locks(r)
    order: list[int] = []
    holder = locks.acquire("queue", ttl=30)

    def wait_and_hold(position: int) -> None:
        with locks.lock("queue", ttl=30, wait=10):
            order.append(position)
            sleep(0.05)

    started = []
    for position in range(4):
        started.append(spawn(functools.partial(wait_and_hold, position)))
        until_queued(r, "lock:queue", position + 1)
    sleep(0.3)
    locks.release(holder)
    for task, outcome in started:
        join(task, 10)
        assert "error" not in outcome, outcome
    lines = monitor.stop()
    assert order == [0, 1, 2, 3]
    assert monitor.count(lines, "LOCK.ACQUIRE") == 5, "holder + one per waiter"


@pytest.mark.parametrize("blocking_timeout", [None, 3])
def test_a_wait_longer_than_the_socket_timeout_ends_in_a_grant(
    server: Server, r: redis.Redis, blocking_timeout: Optional[float]
) -> None:
    client = redis.Redis(port=server.port, socket_timeout=0.3)
    holder = drop_in(client, "long", timeout=10)
    assert holder.acquire(blocking=False)
    later(1.0, r.delete, "long")
    waiter = drop_in(client, "long", timeout=10, blocking_timeout=blocking_timeout)
    start = time.monotonic()
    assert waiter.acquire()
    assert 0.9 < time.monotonic() - start < 2.5
    assert waiter.owned()
    waiter.release()
    client.close()


def test_a_managers_wait_longer_than_the_socket_timeout_ends_in_a_grant(
    server: Server,
) -> None:
    client = redis.Redis(port=server.port, socket_timeout=0.3)
    locks = fencelock.Locks(client)
    holder = locks.acquire("long", ttl=10)
    later(1.0, locks.release, holder)
    start = time.monotonic()
    lease = locks.acquire("long", ttl=10, wait=5)
    assert 0.9 < time.monotonic() - start < 2.5
    assert lease.fence > holder.fence
    locks.release(lease)
    client.close()


@pytest.fixture
def proxy(server: Server, r: Any) -> Iterator[Proxy]:
    started = Proxy(server.port)
    yield started
    started.close()


def retrying_client(proxy: Proxy, **kwargs: Any) -> redis.Redis:
    # retry_on_error too: redis-py < 6 re-sends only the errors listed there.
    return redis.Redis(
        port=proxy.port,
        retry=redis.retry.Retry(NoBackoff(), 2),
        retry_on_error=[redis.ConnectionError],
        **kwargs,
    )


def test_without_a_token_a_lost_reply_orphans_the_grant(
    proxy: Proxy, r: redis.Redis
) -> None:
    """The trap itself: a server-generated token whose reply was lost; redis-py
    re-sends, the server answers busy, and nobody knows the holder's token."""
    client = retrying_client(proxy)
    proxy.cut_reply_to(b"LOCK.ACQUIRE")
    assert client.execute_command("LOCK.ACQUIRE", "orphan", 10000) is None
    assert proxy.cuts == 1
    assert r.exists("orphan") == 1, "held by a token nobody has"
    client.close()


def test_a_lost_grant_reply_is_the_same_grant_on_retry(
    proxy: Proxy, r: redis.Redis
) -> None:
    client = retrying_client(proxy)
    lock = drop_in(client, "foo", timeout=10)
    proxy.cut_reply_to(b"LOCK.ACQUIRE")
    assert lock.acquire(blocking=False)
    assert proxy.cuts == 1
    assert r.execute_command("LOCK.FENCE", "foo", lock.local.token) == lock.fence
    lock.release()
    assert r.exists("foo") == 0
    client.close()


def test_a_lost_grant_reply_after_a_long_wait_is_the_same_grant(
    proxy: Proxy, r: redis.Redis
) -> None:
    """The same on the connection that carries a long wait."""
    holder = drop_in(r, "foo", timeout=10, thread_local=False)
    assert holder.acquire(blocking=False)
    client = retrying_client(proxy, socket_timeout=0.3)
    lock = drop_in(client, "foo", timeout=10, blocking_timeout=3)
    later(0.5, holder.release)
    proxy.cut_reply_to(b"LOCK.ACQUIRE")
    assert lock.acquire()
    assert proxy.cuts == 1
    assert r.execute_command("LOCK.FENCE", "foo", lock.local.token) == lock.fence
    lock.release()
    assert r.exists("foo") == 0
    client.close()


def test_a_managers_lost_grant_reply_is_the_same_grant(
    proxy: Proxy, r: redis.Redis
) -> None:
    client = retrying_client(proxy)
    locks = fencelock.Locks(client)
    proxy.cut_reply_to(b"LOCK.ACQUIRE")
    with locks.lock("foo", ttl=10) as lease:
        assert proxy.cuts == 1
        fence = r.execute_command("LOCK.FENCE", lease.key, lease.token)
        assert fence == lease.fence
    assert lease.released
    client.close()
    assert r.exists("lock:foo") == 0
