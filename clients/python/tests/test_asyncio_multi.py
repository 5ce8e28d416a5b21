"""``fencelock.asyncio.MultiLock`` and ``fencelock.asyncio.Locks.lock_all``
(``LOCK.ACQUIREALL``) against a real server: every key or none, fences in the order
of the keys, a release per key, the manager's session, ``Deadlock`` between two tasks,
cancellation that leaves nothing held, the constructions of a client, Redis Cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
from conftest import async_client, run
from redis.exceptions import ClusterCrossSlotError, LockError, LockNotOwnedError
from servers import Server

import fencelock
import fencelock.asyncio
from fencelock.asyncio import (
    Deadlock,
    LockLost,
    LockNotAcquired,
    Locks,
    ManagedMultiLock,
    MultiLock,
)


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def waiters(client: redis.Redis, key: str) -> int:
    info = fencelock.lock_info(client, key)
    return 0 if info is None else info["waiters"]


async def until(condition: Any, timeout: float = 5, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_asyncio_every_key_or_none(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        other = fencelock.asyncio.Lock(client, "b", timeout=30)
        assert await other.acquire(blocking=False)
        multi = MultiLock(client, ["a", "b", "c"], timeout=30)
        assert not await multi.acquire(blocking=False)
        assert not await multi.acquire(blocking_timeout=0.2)
        assert admin.exists("a", "c") == 0 and multi.fences == []
        assert not await multi.owned() and await multi.locked()

        async def release_later() -> None:
            await asyncio.sleep(0.3)
            await other.release()

        _, granted = await asyncio.gather(
            release_later(), multi.acquire(blocking_timeout=5)
        )
        assert granted and await multi.owned()
        assert other.fence is not None and min(multi.fences) > other.fence
        tokens = multi.local.token
        fences = [
            admin.execute_command("LOCK.FENCE", key, tokens) for key in ("a", "b", "c")
        ]
        assert fences == multi.fences, "in the order of the keys"
        before = calls(admin, "lock.release")
        await multi.release()
        assert calls(admin, "lock.release") - before == 3
        assert admin.exists("a", "b", "c") == 0

        assert await multi.acquire(token="t")
        admin.execute_command("LOCK.RELEASE", "c", "t")
        with pytest.raises(LockNotOwnedError, match="'c'"):
            await multi.release()
        assert admin.exists("a", "b", "c") == 0
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_multilock_context_manager(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        async with MultiLock(client, ["a", "b"], timeout=30) as multi:
            assert await multi.owned() and len(multi.fences) == 2
            assert await multi.extend(10)
            assert all(30_000 < admin.pttl(key) <= 40_000 for key in ("a", "b"))
        assert admin.exists("a", "b") == 0
        admin.set("a", "a plain value")
        with pytest.raises(LockError, match="Unable to acquire lock"):
            async with MultiLock(client, ["a", "b"], timeout=30, blocking_timeout=0.1):
                pass
        admin.delete("a")
        with pytest.raises(LockNotOwnedError):
            async with MultiLock(client, ["a", "b"], timeout=0.1):
                await asyncio.sleep(0.15)
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_lock_all_in_the_session(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        async with Locks(client) as locks:
            held = locks.lock_all(["a", "b"], ttl=0.3)
            assert isinstance(held, ManagedMultiLock)
            async with held:
                session = held.leases[0].session
                assert session is not None
                assert {lease.session for lease in held.leases} == {session}
                refreshes = calls(admin, "lock.refresh")
                await asyncio.sleep(1.0)
                assert calls(admin, "lock.refresh") == refreshes
                await held.ensure_held(check=True)
                held.ensure_held()
                assert held.fences == [lease.fence for lease in held.leases]
            assert admin.exists("lock:a", "lock:b") == 0
            # Lost while held: LockLost on leaving, the rest released.
            with pytest.raises(LockLost):
                async with locks.lock_all(["a", "b"], ttl=30):
                    admin.delete("lock:a")
            assert admin.exists("lock:b") == 0
            with pytest.raises(LockNotAcquired):
                async with locks.lock_all(["a", "b"], ttl=30):  # noqa: SIM117
                    async with locks.lock_all(["b"], ttl=30, blocking=False):
                        pass
            async with locks.lock_all(["a", "b"], ttl=0.3, session=False) as alone:
                assert {lease.session for lease in alone.leases} == {None}
                await asyncio.sleep(0.6)
                alone.ensure_held()
        await client.aclose()

    run(main())
    admin.close()


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


@pytest.mark.parametrize("construction", ["from_url", "blocking_pool"])
def test_asyncio_constructions_carry_a_wait(server: Server, construction: str) -> None:
    async def main() -> None:
        if construction == "from_url":
            client = redis.asyncio.Redis.from_url(server.url + "?socket_timeout=0.3")
        else:
            pool = redis.asyncio.BlockingConnectionPool(
                port=server.port, max_connections=2, timeout=5, socket_timeout=0.3
            )
            client = redis.asyncio.Redis(connection_pool=pool)
        await client.flushall()
        holder = MultiLock(client, ["lock:x"], timeout=10)
        assert await holder.acquire(blocking=False)

        async def release_later() -> None:
            await asyncio.sleep(0.6)
            await holder.release()

        waiter = MultiLock(client, ["lock:y", "lock:x"], timeout=10)
        start = time.monotonic()
        _, granted = await asyncio.gather(
            release_later(), waiter.acquire(blocking_timeout=5)
        )
        assert granted and 0.5 < time.monotonic() - start < 3
        await waiter.release()

        assert await holder.acquire(blocking=False)
        locks = Locks(client)
        start = time.monotonic()
        release = asyncio.ensure_future(release_later())
        async with locks.lock_all(["x", "y"], ttl=10, blocking_timeout=5) as held:
            assert 0.5 < time.monotonic() - start < 3
            assert await held.owned() and len(held.fences) == 2
        await release
        assert await client.exists("lock:x", "lock:y") == 0
        await locks.aclose()
        await client.aclose()
        # A pool given to the client is not the client's to close.
        await client.connection_pool.disconnect()

    run(main())


def test_asyncio_cluster(cluster: list[Server]) -> None:
    async def main() -> None:
        client = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=cluster[0].port
        )
        names = ["{job:3}:a", "{job:3}:b"]
        multi = MultiLock(client, names, timeout=10)
        assert await multi.acquire(blocking=False)
        assert await multi.owned()
        await multi.release()
        locks = Locks(client, prefix="")
        async with locks.lock_all(names, ttl=0.3) as held:
            await asyncio.sleep(0.6)
            await held.ensure_held(check=True)
        assert await client.exists(*names) == 0
        with pytest.raises(ClusterCrossSlotError):
            await MultiLock(client, ["a", "b", "c"], timeout=10).acquire()
        assert await client.exists("a", "b", "c") == 0
        await locks.aclose()
        await client.aclose()

    run(main())
