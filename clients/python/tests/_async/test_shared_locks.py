"""The lock manager with ``shared=True`` and ``limit=n``, on both sides: leases of
readers and of semaphore permits, each with its own refresher, loss report and
``min_hold``; waiting for a leaving holder; ``WrongMode``; a limit checked before
anything is sent. Tasks waiting across modes, cancellation, a cluster, replicas and
waits past the socket timeout are tests/test_shared_locks.py."""

from __future__ import annotations

import time

import pytest
import redis.asyncio

import fencelock.asyncio
from fencelock.asyncio import LockLost, LockNotAcquired, Locks, WrongMode

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
