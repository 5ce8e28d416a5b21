"""The lock manager with ``shared=True`` and ``limit=n``, on both sides: leases of
readers and of semaphore permits, each with its own refresher, loss report and
``min_hold``; waiting for a leaving holder; ``WrongMode``; a limit checked before
anything is sent; waits past the socket timeout, a permit confirmed on a replica,
semaphores and read-write locks on Redis Cluster. Tasks waiting across modes and a
cancelled shared wait are tests/test_shared_locks.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis.asyncio
import redis.asyncio.cluster
from servers import Server, start_replica

import fencelock.asyncio
from fencelock.asyncio import (
    Lock,
    LockLost,
    LockNotAcquired,
    Locks,
    ReadWriteLock,
    Semaphore,
    WrongMode,
    lock_info,
)

from .helpers import later, set_within, sleep, until


async def holds(client: redis.asyncio.Redis, lease: fencelock.asyncio.Lease) -> bool:
    fence = await client.execute_command("LOCK.FENCE", lease.key, lease.token)
    return bool(fence == lease.fence)


async def test_permits_through_the_manager(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    async with (
        locks.lock("api", ttl=30, limit=2) as first,
        locks.lock("api", ttl=30, limit=2) as second,
    ):
        assert (first.mode, first.limit, first.shared) == ("semaphore", 2, True)
        assert first.fence < second.fence
        assert await holds(r, first) and await holds(r, second)
        with pytest.raises(LockNotAcquired):
            async with locks.lock("api", ttl=30, limit=2):
                pytest.fail("a third permit of two")
        info = await locks.info("api")
        assert info is not None
        assert (info["mode"], info["holders"], info["limit"]) == ("semaphore", 2, 2)
        with pytest.raises(WrongMode) as raised:
            await locks.acquire("api", ttl=30, limit=3)
        assert (raised.value.mode, raised.value.limit) == ("semaphore", 2)
        with pytest.raises(WrongMode):
            await locks.acquire("api", ttl=30, shared=True)
    assert first.released and second.released
    assert await r.exists("lock:api") == 0


async def test_a_permit_waits_for_a_leaving_holder(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    holder = await locks.acquire("api", ttl=30, limit=1)
    later(0.2, locks.release, holder)
    start = time.monotonic()
    async with locks.lock("api", ttl=30, limit=1, wait=5) as lease:
        assert 0.15 < time.monotonic() - start < 2
        assert lease.fence > holder.fence


async def test_readers_and_a_writer_through_the_manager(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    async with (
        locks.lock("cfg", ttl=30, shared=True) as a,
        locks.lock("cfg", ttl=30, shared=True) as b,
    ):
        assert (a.mode, a.limit) == ("shared", None)
        assert await holds(r, a) and await holds(r, b)
        with pytest.raises(LockNotAcquired):
            await locks.acquire("cfg", ttl=30)
        start = time.monotonic()
        with pytest.raises(LockNotAcquired):
            # Another manager waits; this one would be refused (it would wait for
            # its own block's readers).
            await Locks(r).acquire("cfg", ttl=30, wait=0.2)
        assert time.monotonic() - start >= 0.2
    async with locks.lock("cfg", ttl=30) as writer:
        assert writer.mode == "exclusive"
        with pytest.raises(LockNotAcquired):
            await locks.acquire("cfg", ttl=30, shared=True)


async def test_every_holder_refreshes_and_is_lost_on_its_own(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    reported: list[fencelock.asyncio.Lease] = []

    async def was_reported() -> bool:
        return reported == [taken]

    async with locks.lock("api", ttl=0.3, limit=3, on_lost=reported.append) as kept:
        async with locks.lock(
            "api", ttl=0.3, limit=3, on_lost=reported.append, lost_ok=True
        ) as taken:
            for _ in range(4):  # twice the ttl
                await sleep(0.15)
                assert await holds(r, kept) and await holds(r, taken)
            # Someone releases one holder's permit behind its back.
            await r.execute_command("LOCK.RELEASE", taken.key, taken.token)
            assert await set_within(taken.lost, 2)
            with pytest.raises(LockLost):
                taken.ensure_held()
            with pytest.raises(LockLost):
                await taken.guard("SET", "x", 1)
            await sleep(0.3)
            assert await holds(r, kept) and not kept.lost.is_set()
            assert await kept.guard("SET", "x", 2) == b"OK"
        await until(was_reported, 2, "on_lost")
    assert kept.released and not taken.released
    assert await r.get("x") == b"2"


async def test_min_hold_cuts_one_holders_lease(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    other = await locks.acquire("cron", ttl=30, shared=True)
    async with locks.lock("cron", ttl=10, shared=True, min_hold=0.5) as lease:
        pass
    assert not lease.released and await holds(r, lease)
    await sleep(0.7)
    assert not await holds(r, lease) and await holds(r, other)
    info = await locks.info("cron")
    assert info is not None and info["holders"] == 1
    await locks.release(other)


async def test_a_limit_is_checked_before_anything_is_sent(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    with pytest.raises(ValueError):
        async with locks.lock("api", ttl=10, limit=0):
            pytest.fail("a semaphore of no permits")
    assert await r.exists("lock:api") == 0


async def test_shared_waits_longer_than_the_socket_timeout(
    server: Server, r: redis.asyncio.Redis
) -> None:
    """On the pinned connection too, the acquire carries its mode: shared, or a
    permit of a semaphore."""
    client = redis.asyncio.Redis(port=server.port, socket_timeout=0.3)
    locks = Locks(client)
    writer = await locks.acquire("cfg", ttl=10)
    later(0.6, locks.release, writer)
    start = time.monotonic()
    reader = await locks.acquire("cfg", ttl=10, shared=True, wait=3)
    assert 0.5 < time.monotonic() - start < 2.5
    info = await locks.info("cfg")
    assert info is not None and info["mode"] == "shared"
    await locks.release(reader)
    holder = await locks.acquire("api", ttl=10, limit=1)
    later(0.6, locks.release, holder)
    permit = await locks.acquire("api", ttl=10, limit=1, wait=3)
    assert permit.mode == "semaphore" and permit.fence > holder.fence
    await locks.release(permit)
    await locks.aclose()
    await client.aclose()


async def test_wait_replicas_confirms_a_permit_on_the_replica(tmp_path: Path) -> None:
    primary = Server(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", primary)
    try:
        client = redis.asyncio.Redis(port=primary.port)
        on_replica = redis.asyncio.Redis(port=replica.port)
        locks = Locks(client)
        async with locks.lock("api", ttl=30, limit=2, wait_replicas=1) as first:
            second = await locks.acquire("api", ttl=30, limit=2, wait_replicas=1)
            info = await lock_info(on_replica, "lock:api")
            assert info is not None, "acknowledged: the replica has both grants now"
            assert (info["mode"], info["holders"], info["limit"]) == ("semaphore", 2, 2)
            fence = await on_replica.execute_command(
                "LOCK.FENCE", "lock:api", first.token
            )
            assert fence == first.fence
            await locks.release(second)
        reader = Lock(client, "rw", timeout=30, shared=True, wait_replicas=1)
        assert await reader.acquire()
        info = await lock_info(on_replica, "rw")
        assert info is not None and info["mode"] == "shared"
        await reader.release()
        await locks.aclose()
        await client.aclose()
        await on_replica.aclose()
    finally:
        replica.stop()
        primary.stop()


async def test_cluster(cluster: list[Server]) -> None:
    client = redis.asyncio.cluster.RedisCluster(
        host="127.0.0.1", port=cluster[0].port, socket_timeout=0.3
    )
    for key in ("sem:a", "sem:b", "sem:c"):
        permits = [Semaphore(client, key, 2, timeout=10) for _ in range(3)]
        assert [await p.acquire(blocking=False) for p in permits] == [
            True,
            True,
            False,
        ]
        assert await permits[2].locked()
        for p in permits[:2]:
            await p.release()
        rw = ReadWriteLock(client, key, timeout=10)
        async with rw.read():
            other = ReadWriteLock(client, key, timeout=10)
            assert not await other.write().acquire(blocking=False)
    locks = Locks(client)
    holder = await locks.acquire("{api}", ttl=10, limit=1)
    later(0.6, locks.release, holder)
    permit = await locks.acquire("{api}", ttl=10, limit=1, wait=3)
    assert permit.mode == "semaphore"
    async with Semaphore(client, "sem:a", 3, timeout=10) as sem:
        assert await sem.owned()
    await locks.release(permit)
    await locks.aclose()
    await client.aclose()
