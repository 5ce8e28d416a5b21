"""The lock helper against a real server: acquire, busy, BLOCK, background refresh,
loss reporting and release in ``finally``."""

from __future__ import annotations

import asyncio
import re

import pytest
import redis.asyncio as redis

from fencelock_locks import LockNotAcquired, Locks


def run(coro):
    return asyncio.run(coro)


async def _with_client(url, body):
    client = redis.Redis.from_url(url)
    try:
        return await body(client)
    finally:
        await client.aclose()


def test_a_lease_holds_the_key_and_releases_it(server_url):
    async def body(client):
        locks = Locks(client)
        async with locks.lock("daily-notif", ttl_ms=60_000) as lease:
            assert lease.key == "lock:daily-notif"
            assert re.fullmatch(rb"[0-9a-f]{32}", lease.token)
            assert lease.fence > 0
            assert await client.type("lock:daily-notif") == b"fencelock"
            assert await client.execute_command("LOCK.FENCE", lease.key) == lease.fence
        assert lease.released
        assert await client.exists("lock:daily-notif") == 0

    run(_with_client(server_url, body))


def test_a_busy_lock_raises_and_leaves_the_holder_alone(server_url):
    async def body(client):
        locks = Locks(client)
        async with locks.lock("report", ttl_ms=60_000) as lease:
            with pytest.raises(LockNotAcquired):
                async with locks.lock("report", ttl_ms=60_000):
                    pytest.fail("entered a held lock")
            assert await client.execute_command("LOCK.FENCE", lease.key, lease.token) == lease.fence

    run(_with_client(server_url, body))


def test_block_waits_for_the_holder_and_gets_a_higher_fence(server_url):
    async def body(client):
        waiter_client = redis.Redis.from_url(server_url)
        locks, waiter_locks = Locks(client), Locks(waiter_client)
        order = []

        async def holder():
            async with locks.lock("queue", ttl_ms=30_000) as lease:
                order.append(("holder", lease.fence))
                await asyncio.sleep(0.3)

        async def waiter():
            await asyncio.sleep(0.05)
            async with waiter_locks.lock("queue", ttl_ms=30_000, block_ms=5_000) as lease:
                order.append(("waiter", lease.fence))

        try:
            await asyncio.gather(holder(), waiter())
        finally:
            await waiter_client.aclose()
        assert [who for who, _ in order] == ["holder", "waiter"]
        assert order[1][1] > order[0][1]

    run(_with_client(server_url, body))


def test_the_lease_is_refreshed_while_the_body_runs_past_the_ttl(server_url):
    async def body(client):
        locks = Locks(client)
        async with locks.lock("long-job", ttl_ms=300) as lease:
            for _ in range(6):
                await asyncio.sleep(0.2)
                assert await client.execute_command("LOCK.FENCE", lease.key, lease.token) == lease.fence
            assert not lease.lost.is_set()
        assert lease.released

    run(_with_client(server_url, body))


def test_a_lost_lock_is_reported_and_refreshing_stops(server_url):
    async def body(client):
        locks = Locks(client)
        reported = []
        async with locks.lock("fragile", ttl_ms=600, on_lost=reported.append) as lease:
            await client.delete("lock:fragile")
            await asyncio.wait_for(lease.lost.wait(), timeout=2)
            assert reported == [lease]
            # Someone else may take it now; the old holder's release must not free it.
            other = await locks.acquire("fragile", ttl_ms=10_000)
        assert not lease.released
        assert await client.execute_command("LOCK.FENCE", other.key, other.token) == other.fence

    run(_with_client(server_url, body))


def test_the_lock_is_released_when_the_body_raises(server_url):
    async def body(client):
        locks = Locks(client)
        with pytest.raises(RuntimeError, match="job failed"):
            async with locks.lock("crashy", ttl_ms=60_000):
                raise RuntimeError("job failed")
        assert await client.exists("lock:crashy") == 0

    run(_with_client(server_url, body))
