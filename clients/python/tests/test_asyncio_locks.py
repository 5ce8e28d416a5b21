"""``fencelock.asyncio.Locks`` against a real server: acquire and busy, waiting in the
server's queue, auto-refresh past the ttl, loss reported within one refresh interval,
release on exceptions and cancellation, ``min_hold``, ``LOCK.INFO``."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
import redis.asyncio
from conftest import async_client, run

from fencelock.asyncio import Lease, LockLost, LockNotAcquired, Locks


def scenario(url: str, body: Any, **client_kwargs: Any) -> None:
    async def main() -> None:
        client = async_client(url, **client_kwargs)
        try:
            await body(client, Locks(client))
        finally:
            await client.aclose()

    run(main())


async def holds(client: redis.asyncio.Redis, lease: Lease) -> bool:
    fence = await client.execute_command("LOCK.FENCE", lease.key, lease.token)
    return fence == lease.fence


def test_a_lease_holds_the_key_and_releases_it(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        async with locks.lock("daily-notif", ttl=60) as lease:
            assert lease.key == "lock:daily-notif"
            assert isinstance(lease.token, str) and len(lease.token) == 32
            assert lease.fence > 0
            assert await holds(client, lease)
            assert 59_000 < await client.pttl("lock:daily-notif") <= 60_000
        assert lease.released
        assert await client.exists("lock:daily-notif") == 0

    scenario(url, body)


def test_busy_fails_at_once_with_wait_zero(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        async with locks.lock("report", ttl=60) as lease:
            start = time.monotonic()
            with pytest.raises(LockNotAcquired):
                async with locks.lock("report", ttl=60, wait=0):
                    pytest.fail("entered a held lock")
            assert time.monotonic() - start < 0.2
            assert await holds(client, lease)

    scenario(url, body)


def test_wait_queues_in_the_server_and_times_out(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        order = []

        async def holder() -> None:
            async with locks.lock("queue", ttl=30) as lease:
                order.append(("holder", lease.fence))
                await asyncio.sleep(0.3)

        async def waiter() -> None:
            await asyncio.sleep(0.05)
            async with locks.lock("queue", ttl=30, wait=5) as lease:
                order.append(("waiter", lease.fence))

        await asyncio.gather(holder(), waiter())
        assert [who for who, _ in order] == ["holder", "waiter"]
        assert order[1][1] > order[0][1]

        async with locks.lock("queue", ttl=30):
            start = time.monotonic()
            with pytest.raises(LockNotAcquired):
                # Another manager: through this one, the wait would be refused at
                # once (it would wait for its own block).
                await type(locks)(client).acquire("queue", ttl=30, wait=0.2)
            assert 0.2 <= time.monotonic() - start < 0.6

    scenario(url, body)


def test_auto_refresh_keeps_the_lock_over_three_ttls(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        async with locks.lock("long-job", ttl=0.3) as lease:
            for _ in range(6):  # 1.2 s: four times the ttl
                await asyncio.sleep(0.2)
                assert await holds(client, lease)
            assert not lease.lost.is_set()
        assert lease.released

    scenario(url, body)


def test_without_auto_refresh_the_lease_runs_out(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        with pytest.raises(LockLost):
            async with locks.lock("short", ttl=0.2, auto_refresh=False) as lease:
                await asyncio.sleep(0.3)
                assert not await holds(client, lease)
                assert lease.lost.is_set(), "reported at the deadline, no refresher"
        assert not lease.released

    scenario(url, body)


@pytest.mark.parametrize("async_callback", [False, True])
def test_a_deleted_key_is_reported_lost_within_one_interval(
    url: str, async_callback: bool
) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        reported: list[Lease] = []

        async def on_lost_async(lease: Lease) -> None:
            reported.append(lease)

        on_lost = on_lost_async if async_callback else reported.append
        async with locks.lock(
            "fragile", ttl=0.6, on_lost=on_lost, lost_ok=True
        ) as lease:
            await client.delete("lock:fragile")
            deleted_at = time.monotonic()
            await asyncio.wait_for(lease.lost.wait(), timeout=2)
            assert time.monotonic() - deleted_at <= 0.2 + 0.1, "one interval: ttl/3"
            assert reported == [lease]
            with pytest.raises(LockLost):
                lease.ensure_held()
            # Someone else takes it now; the old holder's leaving must not free it.
            other = await locks.acquire("fragile", ttl=10)
        assert not lease.released
        assert await holds(client, other)

    scenario(url, body)


def test_the_lock_is_released_when_the_body_raises(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        with pytest.raises(RuntimeError, match="job failed"):
            async with locks.lock("crashy", ttl=60):
                raise RuntimeError("job failed")
        assert await client.exists("lock:crashy") == 0

    scenario(url, body)


def test_cancellation_stops_the_refresher_and_releases(url: str) -> None:
    """The body is cancelled at random moments while the refresher sends a refresh
    every 10 ms, on a client with a socket timeout (redis-py's ``wait_for`` around the
    send, which on Python 3.11 can swallow the refresher's cancellation): every run
    must end promptly, with the lock released and no refresher left running."""

    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        for attempt in range(40):

            async def hold(attempt: int = attempt) -> None:
                async with locks.lock(f"cancel{attempt}", ttl=0.03):
                    await asyncio.sleep(10)

            task = asyncio.ensure_future(hold())
            await asyncio.sleep(random.uniform(0.0, 0.05))
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=1)
            assert done, f"run {attempt} hung after its cancellation"
            assert await client.exists(f"lock:cancel{attempt}") == 0
        await asyncio.sleep(0.05)
        # What may remain is the manager's one refresher, idle (it ends on its own a
        # while after its last lease): no refresh batch, no lease left to refresh.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert len(others) <= 1, "a refresh outlived its lock"
        assert len(locks._refresher._schedule) == 0

    scenario(url, body, socket_timeout=5)


def test_a_timeout_around_the_block_releases(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        async def job() -> None:
            async with locks.lock("slow", ttl=5):
                await asyncio.sleep(5)

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(job(), timeout=0.2)
        assert await client.exists("lock:slow") == 0

    scenario(url, body)


def test_min_hold_keeps_the_lock_for_the_rest_of_it(url: str) -> None:
    """A job that finishes in no time leaves the lock held until ``min_hold`` has
    passed since the grant: a second server firing late finds it busy."""

    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        async with locks.lock("cron", ttl=10, min_hold=0.5) as lease:
            await asyncio.sleep(0.1)
        assert not lease.released
        assert 300 < await client.pttl("lock:cron") <= 400
        with pytest.raises(LockNotAcquired):
            await locks.acquire("cron", ttl=10)
        await asyncio.sleep(0.45)
        assert await client.exists("lock:cron") == 0

        async with locks.lock("cron", ttl=10, min_hold=0.1) as lease:
            await asyncio.sleep(0.15)
        assert lease.released, "min_hold already over: released"

    scenario(url, body)


def test_info(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        assert await locks.info("report") is None
        async with locks.lock("report", ttl=30) as lease:
            info = await locks.info("report")
            assert info is not None
            assert info["held"] is True
            assert info["fence"] == lease.fence
            assert info["ttl_ms"] is not None and 29_000 < info["ttl_ms"] <= 30_000
            assert info["waiters"] == 0
        assert await locks.info("report") is None

    scenario(url, body)
    scenario(url, body, decode_responses=True)


def test_a_chosen_token_and_prefix(url: str) -> None:
    async def body(client: redis.asyncio.Redis, locks: Locks) -> None:
        plain = Locks(client, prefix="")
        async with plain.lock("job:1", ttl=30, token="worker-1") as lease:
            assert lease.key == "job:1"
            assert await client.execute_command("LOCK.FENCE", "job:1", "worker-1")

    scenario(url, body)
