"""``fencelock.asyncio.Locks`` against a real server: acquire and busy, waiting in the
server's queue, auto-refresh past the ttl, loss reported within one refresh interval,
release on exceptions, ``min_hold``, ``LOCK.INFO``, a chosen token and prefix. What
only tasks do (cancellation, a timeout around the block) is
tests/test_asyncio_locks.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio

from fencelock.asyncio import Lease, LockLost, LockNotAcquired, Locks

from .helpers import (
    join,
    later,
    refresher_running,
    set_within,
    sleep,
    spawn,
    until,
)


async def holds(client: redis.asyncio.Redis, lease: Lease) -> bool:
    fence = await client.execute_command("LOCK.FENCE", lease.key, lease.token)
    return bool(fence == lease.fence)


async def test_a_lease_holds_the_key_and_releases_it(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    async with locks.lock("daily-notif", ttl=60) as lease:
        assert lease.key == "lock:daily-notif"
        assert isinstance(lease.token, str) and len(lease.token) == 32
        assert lease.fence > 0
        assert await holds(r, lease)
        assert 59_000 < await r.pttl("lock:daily-notif") <= 60_000
    assert lease.released
    assert await r.exists("lock:daily-notif") == 0


async def test_acquire_busy_and_release(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    async with locks.lock("report", ttl=60) as lease:
        assert lease.key == "lock:report" and await holds(r, lease)
        with pytest.raises(LockNotAcquired):
            async with locks.lock("report", ttl=60):
                pytest.fail("entered a held lock")
    assert lease.released
    assert await r.exists("lock:report") == 0


async def test_busy_fails_at_once_with_wait_zero(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    async with locks.lock("report", ttl=60) as lease:
        start = time.monotonic()
        with pytest.raises(LockNotAcquired):
            async with locks.lock("report", ttl=60, wait=0):
                pytest.fail("entered a held lock")
        assert time.monotonic() - start < 0.2
        assert await holds(r, lease)


async def test_wait_is_served_by_the_server_queue(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    holder = await locks.acquire("queue", ttl=30)
    later(0.2, locks.release, holder)
    start = time.monotonic()
    async with locks.lock("queue", ttl=30, wait=5) as lease:
        assert 0.15 < time.monotonic() - start < 2
        assert lease.fence > holder.fence


async def test_wait_queues_in_the_server_and_times_out(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    order = []

    async def holder() -> None:
        async with locks.lock("queue", ttl=30) as lease:
            order.append(("holder", lease.fence))
            await sleep(0.3)

    async def waiter() -> None:
        await sleep(0.05)
        async with locks.lock("queue", ttl=30, wait=5) as lease:
            order.append(("waiter", lease.fence))

    started = [spawn(holder), spawn(waiter)]
    for task, outcome in started:
        await join(task, 10)
        assert "error" not in outcome, outcome
    assert [who for who, _ in order] == ["holder", "waiter"]
    assert order[1][1] > order[0][1]

    async with locks.lock("queue", ttl=30):
        start = time.monotonic()
        with pytest.raises(LockNotAcquired):
            # Another manager: through this one, the wait would be refused at
            # once (it would wait for its own block).
            await type(locks)(r).acquire("queue", ttl=30, wait=0.2)
        assert 0.2 <= time.monotonic() - start < 0.6


async def test_auto_refresh_keeps_the_lock_over_three_ttls(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    async with locks.lock("long-job", ttl=0.3) as lease:
        for _ in range(6):  # 1.2 s: four times the ttl
            await sleep(0.2)
            assert await holds(r, lease)
        assert not lease.lost.is_set()
    assert lease.released and not lease.lost.is_set()


async def test_without_auto_refresh_the_lease_runs_out(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    with pytest.raises(LockLost):
        async with locks.lock("short", ttl=0.2, auto_refresh=False) as lease:
            await sleep(0.3)
            assert not await holds(r, lease)
            assert lease.lost.is_set(), "reported at the deadline, no refresher"
    assert not lease.released


@pytest.mark.parametrize("async_callback", [False, True])
async def test_a_deleted_key_is_reported_lost_within_one_interval(
    r: redis.asyncio.Redis, async_callback: bool
) -> None:
    locks = Locks(r)
    reported: list[Lease] = []

    async def on_lost_async(lease: Lease) -> None:
        reported.append(lease)

    async def was_reported() -> bool:
        return bool(reported)

    on_lost: Any = on_lost_async if async_callback else reported.append
    async with locks.lock("fragile", ttl=0.6, on_lost=on_lost, lost_ok=True) as lease:
        await r.delete("lock:fragile")
        deleted_at = time.monotonic()
        assert await set_within(lease.lost, 2)
        assert time.monotonic() - deleted_at <= 0.2 + 0.1, "one interval: ttl/3"
        # on_lost runs right after the event is set (on the refresher's thread, on
        # the threads' side).
        await until(was_reported, 2, "on_lost")
        assert reported == [lease]
        with pytest.raises(LockLost):
            lease.ensure_held()
        # Someone else takes it now; the old holder's leaving must not free it.
        other = await locks.acquire("fragile", ttl=10)
    assert not lease.released
    assert await holds(r, other)


async def test_an_exception_in_the_block_releases(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(RuntimeError, match="job failed"):
        async with locks.lock("crashy", ttl=60):
            raise RuntimeError("job failed")
    assert await r.exists("lock:crashy") == 0

    async def ended() -> bool:
        return not refresher_running(locks)

    await until(ended, 5, "the refresher to end a while after its last lease")


@pytest.mark.parametrize("session", [True, False])
async def test_close_returns_once_the_refresher_has_ended(
    r: redis.asyncio.Redis, session: bool
) -> None:
    """The refresher lingers 2 s after the last lease; ``close()`` ends it and returns
    only once it has ended, so that a fork right after it is a single-threaded
    process's (Python 3.12 warns at a fork with threads). It used to only ask the
    thread (task) to end, which ran on for a moment after ``close()`` returned, and
    without sessions it did not even ask. The manager goes on afterwards."""
    locks = Locks(r, session=session)
    async with locks.lock("closing", ttl=10):
        pass
    assert refresher_running(locks), "it lingers after the last lease"
    await locks.aclose()
    assert not refresher_running(locks)
    async with locks.lock("closing", ttl=10) as lease:
        assert refresher_running(locks)
        assert await holds(r, lease)
    await locks.aclose()
    assert not refresher_running(locks)


async def test_min_hold_keeps_the_lock_for_the_rest_of_it(
    r: redis.asyncio.Redis,
) -> None:
    """A job that finishes in no time leaves the lock held until ``min_hold`` has
    passed since the grant: a second server firing late finds it busy."""
    locks = Locks(r)
    async with locks.lock("cron-now", ttl=10, min_hold=0.5) as lease:
        pass
    assert not lease.released
    assert 400 < await r.pttl("lock:cron-now") <= 500
    with pytest.raises(LockNotAcquired):
        await locks.acquire("cron-now", ttl=10)

    async with locks.lock("cron", ttl=10, min_hold=0.5) as lease:
        await sleep(0.1)
    assert not lease.released
    assert 300 < await r.pttl("lock:cron") <= 400
    with pytest.raises(LockNotAcquired):
        await locks.acquire("cron", ttl=10)
    await sleep(0.45)
    assert await r.exists("lock:cron") == 0

    async with locks.lock("cron", ttl=10, min_hold=0.1) as lease:
        await sleep(0.15)
    assert lease.released, "min_hold already over: released"


async def test_info(any_r: redis.asyncio.Redis) -> None:
    locks = Locks(any_r)
    assert await locks.info("report") is None
    async with locks.lock("report", ttl=30) as lease:
        info = await locks.info("report")
        assert info is not None
        assert (info["held"], info["fence"], info["waiters"]) == (True, lease.fence, 0)
        assert info["held"] is True
        assert info["ttl_ms"] is not None and 29_000 < info["ttl_ms"] <= 30_000
    assert await locks.info("report") is None


async def test_a_chosen_token_and_prefix(r: redis.asyncio.Redis) -> None:
    plain = Locks(r, prefix="")
    async with plain.lock("job:1", ttl=30, token="worker-1") as lease:
        assert lease.key == "job:1"
        assert await r.execute_command("LOCK.FENCE", "job:1", "worker-1")
