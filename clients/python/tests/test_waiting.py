"""Waiting is the server's: waiters are served in arrival order with one
``LOCK.ACQUIRE`` each (no polling, seen by ``MONITOR``), a wait longer than the
client's socket timeout still ends in a grant, and a grant whose reply is lost is not
orphaned by redis-py's automatic re-send."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from conftest import run
from monitor import Monitor
from proxy import Proxy
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import Server, wait_until

import fencelock
import fencelock.asyncio


def waiters(client: redis.Redis, key: str) -> int:
    info = fencelock.lock_info(client, key)
    return 0 if info is None else info["waiters"]


async def until_queued(client: redis.Redis, key: str, count: int) -> None:
    deadline = time.monotonic() + 5
    while waiters(client, key) < count and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


def test_waiters_are_served_fifo_with_one_acquire_each(
    server: Server, r: redis.Redis
) -> None:
    holder = r.lock("queue", timeout=30, lock_class=fencelock.Lock, thread_local=False)
    assert holder.acquire(blocking=False)
    monitor = Monitor(server.port)
    order: list[int] = []

    def wait_and_hold(position: int) -> None:
        # redis-py 8's default client (5 s socket timeout), no blocking_timeout.
        client = server.client()
        lock = client.lock("queue", timeout=30, lock_class=fencelock.Lock)
        assert lock.acquire()
        order.append(position)
        time.sleep(0.05)
        lock.release()
        client.close()

    threads = []
    for position in range(4):
        thread = threading.Thread(target=wait_and_hold, args=(position,))
        thread.start()
        threads.append(thread)
        # Queued before the next one starts: arrival order is known.
        wait_until(lambda p=position: waiters(r, "queue") == p + 1, 5, "queued")
    time.sleep(0.3)  # pollers would show up now
    holder.release()
    for thread in threads:
        thread.join(10)
    lines = monitor.stop()
    assert order == [0, 1, 2, 3]
    assert monitor.count(lines, "LOCK.ACQUIRE") == 4, "one per waiter"


def test_asyncio_waiters_are_served_fifo_with_one_acquire_each(
    server: Server, r: redis.Redis
) -> None:
    async def main() -> list[int]:
        client = redis.asyncio.Redis(port=server.port)
        locks = fencelock.asyncio.Locks(client)
        order: list[int] = []
        holder = await locks.acquire("queue", ttl=30)

        async def wait_and_hold(position: int) -> None:
            async with locks.lock("queue", ttl=30, wait=10):
                order.append(position)
                await asyncio.sleep(0.05)

        tasks = []
        for position in range(4):
            tasks.append(asyncio.ensure_future(wait_and_hold(position)))
            await until_queued(r, "lock:queue", position + 1)
        await asyncio.sleep(0.3)
        await locks.release(holder)
        await asyncio.gather(*tasks)
        await client.aclose()
        return order

    monitor = Monitor(server.port)
    order = run(main())
    lines = monitor.stop()
    assert order == [0, 1, 2, 3]
    assert monitor.count(lines, "LOCK.ACQUIRE") == 5, "holder + one per waiter"


@pytest.mark.parametrize("blocking_timeout", [None, 3])
def test_a_wait_longer_than_the_socket_timeout_ends_in_a_grant(
    server: Server, r: redis.Redis, blocking_timeout: float
) -> None:
    client = server.client(socket_timeout=0.3)
    holder = client.lock("long", timeout=10, lock_class=fencelock.Lock)
    assert holder.acquire(blocking=False)
    released = threading.Timer(1.0, r.delete, args=("long",))
    released.start()
    waiter = client.lock(
        "long", timeout=10, blocking_timeout=blocking_timeout, lock_class=fencelock.Lock
    )
    start = time.monotonic()
    assert waiter.acquire()
    assert 0.9 < time.monotonic() - start < 2.5
    assert waiter.owned()
    released.join()
    waiter.release()
    client.close()


def test_asyncio_wait_longer_than_the_socket_timeout(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(port=server.port, socket_timeout=0.3)
        locks = fencelock.asyncio.Locks(client)
        holder = await locks.acquire("long", ttl=10)

        async def release_later() -> None:
            await asyncio.sleep(1.0)
            await locks.release(holder)

        start = time.monotonic()
        _, lease = await asyncio.gather(
            release_later(), locks.acquire("long", ttl=10, wait=5)
        )
        assert 0.9 < time.monotonic() - start < 2.5
        assert lease.fence > holder.fence
        await client.aclose()

    run(main())


@pytest.fixture
def proxy(server: Server, r: redis.Redis) -> Iterator[Proxy]:
    started = Proxy(server.port)
    yield started
    started.close()


def retrying_client(proxy: Proxy, **kwargs: object) -> redis.Redis:
    # retry_on_error too: redis-py < 6 re-sends only the errors listed there.
    return redis.Redis(
        port=proxy.port,
        retry=Retry(NoBackoff(), 2),
        retry_on_error=[redis.ConnectionError],
        **kwargs,  # type: ignore[arg-type]
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
    lock = client.lock("foo", timeout=10, lock_class=fencelock.Lock)
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
    holder = r.lock("foo", timeout=10, lock_class=fencelock.Lock, thread_local=False)
    assert holder.acquire(blocking=False)
    client = retrying_client(proxy, socket_timeout=0.3)
    lock = client.lock("foo", timeout=10, blocking_timeout=3, lock_class=fencelock.Lock)
    threading.Timer(0.5, holder.release).start()
    proxy.cut_reply_to(b"LOCK.ACQUIRE")
    assert lock.acquire()
    assert proxy.cuts == 1
    assert r.execute_command("LOCK.FENCE", "foo", lock.local.token) == lock.fence
    lock.release()
    assert r.exists("foo") == 0
    client.close()


def test_asyncio_lost_grant_reply_is_the_same_grant(
    proxy: Proxy, r: redis.Redis
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(
            port=proxy.port,
            retry=_async_retry(),
            retry_on_error=[redis.ConnectionError],
        )
        locks = fencelock.asyncio.Locks(client)
        proxy.cut_reply_to(b"LOCK.ACQUIRE")
        async with locks.lock("foo", ttl=10) as lease:
            assert proxy.cuts == 1
            assert (
                r.execute_command("LOCK.FENCE", lease.key, lease.token) == lease.fence
            )
        assert lease.released
        await client.aclose()

    run(main())
    assert r.exists("lock:foo") == 0


def _async_retry() -> object:
    from redis.asyncio.retry import Retry as AsyncRetry

    return AsyncRetry(NoBackoff(), 2)
