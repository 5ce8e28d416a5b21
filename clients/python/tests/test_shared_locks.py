"""The lock managers (``fencelock.Locks`` and ``fencelock.asyncio.Locks``) with
``shared=True`` and ``limit=n``: leases of readers and of semaphore permits, each with
its own refresher, loss report and ``min_hold``; waiting across modes; ``WrongMode``;
and the same on a cluster and past the socket timeout."""

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
from servers import Server, start_replica, wait_until

import fencelock
import fencelock.asyncio
from fencelock import LockLost, LockNotAcquired, Locks, WrongMode


def holds(client: redis.Redis, lease: fencelock.Lease) -> bool:
    fence = client.execute_command("LOCK.FENCE", lease.key, lease.token)
    return bool(fence == lease.fence)


def test_permits_through_the_manager(r: redis.Redis) -> None:
    locks = Locks(r)
    with (
        locks.lock("api", ttl=30, limit=2) as first,
        locks.lock("api", ttl=30, limit=2) as second,
    ):
        assert (first.mode, first.limit, first.shared) == ("semaphore", 2, True)
        assert first.fence < second.fence
        assert holds(r, first) and holds(r, second)
        with pytest.raises(LockNotAcquired), locks.lock("api", ttl=30, limit=2):
            pytest.fail("a third permit of two")
        info = locks.info("api")
        assert info is not None
        assert (info["mode"], info["holders"], info["limit"]) == ("semaphore", 2, 2)
        with pytest.raises(WrongMode) as raised:
            locks.acquire("api", ttl=30, limit=3)
        assert (raised.value.mode, raised.value.limit) == ("semaphore", 2)
        with pytest.raises(WrongMode):
            locks.acquire("api", ttl=30, shared=True)
    assert first.released and second.released
    assert r.exists("lock:api") == 0


def test_a_permit_waits_for_a_leaving_holder(r: redis.Redis) -> None:
    locks = Locks(r)
    holder = locks.acquire("api", ttl=30, limit=1)
    threading.Timer(0.2, locks.release, args=(holder,)).start()
    start = time.monotonic()
    with locks.lock("api", ttl=30, limit=1, wait=5) as lease:
        assert 0.15 < time.monotonic() - start < 2
        assert lease.fence > holder.fence


def test_readers_and_a_writer_through_the_manager(r: redis.Redis) -> None:
    locks = Locks(r)
    with (
        locks.lock("cfg", ttl=30, shared=True) as a,
        locks.lock("cfg", ttl=30, shared=True) as b,
    ):
        assert (a.mode, a.limit) == ("shared", None)
        assert holds(r, a) and holds(r, b)
        with pytest.raises(LockNotAcquired):
            locks.acquire("cfg", ttl=30)
        start = time.monotonic()
        with pytest.raises(LockNotAcquired):
            # Another manager waits; this one would be refused (it would wait for
            # its own block's readers).
            Locks(r).acquire("cfg", ttl=30, wait=0.2)
        assert time.monotonic() - start >= 0.2
    with locks.lock("cfg", ttl=30) as writer:
        assert writer.mode == "exclusive"
        with pytest.raises(LockNotAcquired):
            locks.acquire("cfg", ttl=30, shared=True)


def test_every_holder_refreshes_and_is_lost_on_its_own(r: redis.Redis) -> None:
    locks = Locks(r)
    reported: list[fencelock.Lease] = []
    with locks.lock("api", ttl=0.3, limit=3, on_lost=reported.append) as kept:
        with locks.lock(
            "api", ttl=0.3, limit=3, on_lost=reported.append, lost_ok=True
        ) as taken:
            for _ in range(4):  # twice the ttl
                time.sleep(0.15)
                assert holds(r, kept) and holds(r, taken)
            # Someone releases one holder's permit behind its back.
            r.execute_command("LOCK.RELEASE", taken.key, taken.token)
            assert taken.lost.wait(2)
            with pytest.raises(LockLost):
                taken.ensure_held()
            with pytest.raises(LockLost):
                taken.guard("SET", "x", 1)
            time.sleep(0.3)
            assert holds(r, kept) and not kept.lost.is_set()
            assert kept.guard("SET", "x", 2) == b"OK"
        wait_until(lambda: reported == [taken], 2, "on_lost")
    assert kept.released and not taken.released
    assert r.get("x") == b"2"


def test_min_hold_cuts_one_holders_lease(r: redis.Redis) -> None:
    locks = Locks(r)
    other = locks.acquire("cron", ttl=30, shared=True)
    with locks.lock("cron", ttl=10, shared=True, min_hold=0.5) as lease:
        pass
    assert not lease.released and holds(r, lease)
    time.sleep(0.7)
    assert not holds(r, lease) and holds(r, other)
    info = locks.info("cron")
    assert info is not None and info["holders"] == 1
    locks.release(other)


def test_a_limit_is_checked_before_anything_is_sent(r: redis.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(ValueError), locks.lock("api", ttl=10, limit=0):
        pytest.fail("a semaphore of no permits")
    assert r.exists("lock:api") == 0


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
