"""What only asyncio has, for ``fencelock.asyncio.MultiLock`` and
``Locks.lock_all``: ``Deadlock`` between two tasks of one loop, and cancellation
(of a wait, or at any moment) that leaves nothing held. The cases both sides share
are in ``tests/_async/test_multi.py`` (``tests/_sync`` generated)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from conftest import async_client, run

import fencelock
import fencelock.asyncio
from fencelock.asyncio import (
    Deadlock,
    Locks,
    MultiLock,
)


def waiters(client: redis.Redis, key: str) -> int:
    info = fencelock.lock_info(client, key)
    return 0 if info is None else info["waiters"]


async def until(condition: Any, timeout: float = 5, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("second_asks_with", ["lock", "lock_all"])
def test_asyncio_deadlock_between_two_tasks(url: str, second_asks_with: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        one, two = Locks(client), Locks(client)
        one_holds, two_holds = asyncio.Event(), asyncio.Event()

        async def first() -> list[int]:
            async with one.lock("a", ttl=30):
                one_holds.set()
                await two_holds.wait()
                async with one.lock_all(["b", "c"], ttl=30, blocking_timeout=10) as h:
                    return h.fences

        async def second() -> None:
            async with two.lock("b", ttl=30):
                two_holds.set()
                await one_holds.wait()
                await until(lambda: waiters(admin, "lock:b") == 1, what="queued")
                if second_asks_with == "lock":
                    async with two.lock("a", ttl=30, wait=10):
                        pass
                else:
                    async with two.lock_all(["d", "a"], ttl=30, blocking_timeout=10):
                        pass

        results = await asyncio.wait_for(
            asyncio.gather(first(), second(), return_exceptions=True), 15
        )
        fences, refused = results
        assert isinstance(refused, Deadlock), results
        assert refused.key == "lock:a" and refused.held == "lock:b"
        assert isinstance(fences, list) and len(fences) == 2
        assert admin.exists("lock:a", "lock:b", "lock:c", "lock:d") == 0
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_a_cancelled_wait_leaves_nothing_held(url: str) -> None:
    """Tasks waiting in ``MultiLock.acquire`` and ``lock_all`` are cancelled: when
    the holder releases, every key is free, none granted to a cancelled waiter, and
    the manager watches nothing."""
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        holder = fencelock.asyncio.Lock(client, "lock:b", timeout=30)
        assert await holder.acquire(blocking=False)
        locks = Locks(client)
        multi = MultiLock(client, ["lock:a", "lock:b"], timeout=30)
        managed = locks.lock_all(["c", "b"], ttl=30)
        tasks = [
            asyncio.ensure_future(multi.acquire(blocking_timeout=10)),
            asyncio.ensure_future(managed.acquire()),
        ]
        await until(lambda: waiters(admin, "lock:b") == 2, what="both queued")
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)
        await holder.release()
        await asyncio.sleep(0.1)
        assert admin.exists("lock:a", "lock:b", "lock:c") == 0
        assert fencelock.lock_info(admin, "lock:b") is None, "nobody queued"
        assert len(locks._refresher._schedule) == 0
        assert not managed.leases
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_cancellation_at_any_moment_leaves_nothing(url: str) -> None:
    """Acquires cancelled at random moments (waiting, just granted, confirming,
    holding): afterwards nothing is held and nothing watched."""
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url, socket_timeout=5)
        locks = Locks(client)
        holder = Locks(client)
        for attempt in range(30):
            busy = await holder.acquire(f"b{attempt}", ttl=0.05)
            names = [f"a{attempt}", f"b{attempt}"]

            async def work(names: list[str] = names) -> None:
                async with locks.lock_all(names, ttl=0.03, blocking_timeout=5):
                    await asyncio.sleep(10)

            task = asyncio.ensure_future(work())
            await asyncio.sleep(0.005 * (attempt % 12))
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=1)
            assert done, f"run {attempt} hung after its cancellation"
            await holder.release(busy)
        await asyncio.sleep(0.1)
        keys = [f"lock:{p}{n}" for n in range(30) for p in "ab"]
        assert [key for key in keys if admin.exists(key)] == []
        assert len(locks._refresher._schedule) == 0, "nothing watched"
        await client.aclose()

    run(main())
    admin.close()
