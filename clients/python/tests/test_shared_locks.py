"""The lock managers (``fencelock.Locks`` and ``fencelock.asyncio.Locks``) with
``shared=True`` and ``limit=n``, where each side has its own test: asyncio tasks
waiting across modes and a cancelled shared wait, waits past the socket timeout, a
permit confirmed on a replica, and a cluster. What both sides do alike is
tests/_async/test_shared_locks.py (the sync side generated from it)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from conftest import async_client, run
from servers import Server, start_replica

import fencelock
import fencelock.asyncio
from fencelock import Locks


def test_asyncio_manager(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        async with locks.lock("api", ttl=0.3, limit=2) as first:
            assert first.mode == "semaphore"
            async with locks.lock("api", ttl=0.3, limit=2, lost_ok=True) as second:
                with pytest.raises(fencelock.asyncio.LockNotAcquired):
                    await locks.acquire("api", ttl=10, limit=2)
                with pytest.raises(fencelock.asyncio.WrongMode):
                    await locks.acquire("api", ttl=10, limit=5)
                await asyncio.sleep(0.7)  # refreshed past twice the ttl
                assert not first.lost.is_set() and not second.lost.is_set()
                await client.execute_command("LOCK.RELEASE", second.key, second.token)
                await asyncio.wait_for(second.lost.wait(), 2)
                assert not first.lost.is_set()
                info = await locks.info("api")
                assert info is not None and info["holders"] == 1

            third = await locks.acquire("api", ttl=10, limit=2, wait=0)
            assert third.fence > second.fence, "the permit second lost"
            await locks.release(third)

        async with locks.lock("cfg", ttl=10, shared=True) as reader:
            assert reader.mode == "shared"
            order: list[str] = []

            async def writer() -> None:
                async with locks.lock("cfg", ttl=10, wait=5):
                    order.append("writer")

            async def late_reader() -> None:
                await asyncio.sleep(0.1)  # after the writer queued
                async with locks.lock("cfg", ttl=10, shared=True, wait=5):
                    order.append("reader")

            waiting = asyncio.gather(writer(), late_reader())
            await asyncio.sleep(0.3)
            assert order == [], "the late reader waits behind the writer"
        await waiting
        assert order == ["writer", "reader"]
        assert await client.exists("lock:cfg") == 0
        await client.aclose()

    run(main())


def test_asyncio_cancelled_shared_wait_leaves_nothing(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        writer = await locks.acquire("cfg", ttl=10)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                locks.acquire("cfg", ttl=10, shared=True, wait=5), 0.3
            )
        await locks.release(writer)
        await asyncio.sleep(0.1)
        assert await client.exists("lock:cfg") == 0
        await client.aclose()

    run(main())


def test_shared_waits_longer_than_the_socket_timeout(server: Server) -> None:
    """On the pinned connection too, the acquire carries its mode."""
    client = server.client(socket_timeout=0.3)
    client.flushall()
    locks = Locks(client)
    writer = locks.acquire("cfg", ttl=10)
    threading.Timer(0.6, locks.release, args=(writer,)).start()
    start = time.monotonic()
    reader = locks.acquire("cfg", ttl=10, shared=True, wait=3)
    assert 0.5 < time.monotonic() - start < 2.5
    info = locks.info("cfg")
    assert info is not None and info["mode"] == "shared"
    locks.release(reader)

    async def main() -> None:
        async_r = redis.asyncio.Redis(port=server.port, socket_timeout=0.3)
        async_locks = fencelock.asyncio.Locks(async_r)
        holder = await async_locks.acquire("api", ttl=10, limit=1)

        async def release_later() -> None:
            await asyncio.sleep(0.6)
            await async_locks.release(holder)

        _, permit = await asyncio.gather(
            release_later(), async_locks.acquire("api", ttl=10, limit=1, wait=3)
        )
        assert permit.mode == "semaphore" and permit.fence > holder.fence
        await async_locks.release(permit)
        await async_r.aclose()

    run(main())
    client.close()


def test_wait_replicas_confirms_a_permit_on_the_replica(tmp_path: Path) -> None:
    primary = Server(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", primary)
    try:
        client, on_replica = primary.client(), replica.client()
        locks = Locks(client)
        with locks.lock("api", ttl=30, limit=2, wait_replicas=1) as first:
            second = locks.acquire("api", ttl=30, limit=2, wait_replicas=1)
            info = fencelock.lock_info(on_replica, "lock:api")
            assert info is not None, "acknowledged: the replica has both grants now"
            assert (info["mode"], info["holders"], info["limit"]) == ("semaphore", 2, 2)
            fence = on_replica.execute_command("LOCK.FENCE", "lock:api", first.token)
            assert fence == first.fence
            locks.release(second)
        reader = fencelock.Lock(client, "rw", timeout=30, shared=True, wait_replicas=1)
        assert reader.acquire()
        info = fencelock.lock_info(on_replica, "rw")
        assert info is not None and info["mode"] == "shared"
        reader.release()
        client.close()
        on_replica.close()
    finally:
        replica.stop()
        primary.stop()


def test_cluster(cluster: list[Server]) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    for key in ("sem:a", "sem:b", "sem:c"):
        permits = [fencelock.Semaphore(client, key, 2, timeout=10) for _ in range(3)]
        assert [p.acquire(blocking=False) for p in permits] == [True, True, False]
        assert permits[2].locked()
        for p in permits[:2]:
            p.release()
        rw = fencelock.ReadWriteLock(client, key, timeout=10)
        with rw.read():
            other = fencelock.ReadWriteLock(client, key, timeout=10)
            assert not other.write().acquire(blocking=False)
    client.close()

    async def main() -> None:
        async_r = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=cluster[0].port, socket_timeout=0.3
        )
        locks = fencelock.asyncio.Locks(async_r)
        holder = await locks.acquire("{api}", ttl=10, limit=1)

        async def release_later() -> None:
            await asyncio.sleep(0.6)
            await locks.release(holder)

        _, permit = await asyncio.gather(
            release_later(), locks.acquire("{api}", ttl=10, limit=1, wait=3)
        )
        assert permit.mode == "semaphore"
        async with fencelock.asyncio.Semaphore(async_r, "sem:a", 3, timeout=10) as sem:
            assert await sem.owned()
        await locks.release(permit)
        await async_r.aclose()

    run(main())
