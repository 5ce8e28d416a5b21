"""Sessions (``Locks(client, session=True)``, the default), what only asyncio has,
written by hand: ``async with`` the manager and ``close`` as the alias of ``aclose``,
a cancelled ``aclose`` that still closes, and tasks cancelled at any moment of their
acquire or block, or while they wait, leaving no holding and no heartbeat. The
threads' side's own is tests/test_sessions.py; what both sides do alike is
tests/_async/test_sessions.py (the sync side generated from it)."""

from __future__ import annotations

import asyncio

import redis
from conftest import async_client, run
from session_counts import Counts, held_by

import fencelock
import fencelock.asyncio


def test_asyncio_close_and_async_with(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        async with fencelock.asyncio.Locks(client) as locks:
            reported: list[fencelock.asyncio.Lease] = []
            outcome: list[BaseException] = []

            async def block() -> None:
                try:
                    async with locks.lock("ac", ttl=30, on_lost=reported.append):
                        await asyncio.sleep(5)
                except BaseException as error:
                    outcome.append(error)

            task = asyncio.ensure_future(block())
            await asyncio.sleep(0.1)
            assert admin.exists("lock:ac") == 1
            await locks.close()  # the alias of aclose
            assert admin.exists("lock:ac") == 0
            assert len(reported) == 1
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            lease = await locks.acquire("ac2", ttl=30, session=True)
        assert admin.exists("lock:ac2") == 0 and lease.released
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_a_cancelled_aclose_still_closes(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        leases = [await locks.acquire(f"k{i}", ttl=30, session=True) for i in range(5)]
        closing = asyncio.ensure_future(locks.aclose())
        await asyncio.sleep(0)
        closing.cancel()
        await asyncio.gather(closing, return_exceptions=True)
        await asyncio.sleep(0.1)
        assert all(lease.released for lease in leases)
        assert admin.exists(*(lease.key for lease in leases)) == 0
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_cancellation_leaves_no_holding_and_no_heartbeat(url: str) -> None:
    """Tasks cancelled at random moments of their acquire (waiting in the queue, or
    just granted) and of their block: afterwards the session holds nothing on the
    server, nothing is watched, and no keepalive is sent any more."""
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url, socket_timeout=5)
        locks = fencelock.asyncio.Locks(client)
        other = fencelock.asyncio.Locks(client)
        sessions = set()
        for attempt in range(30):
            busy = await other.acquire(f"busy{attempt}", ttl=0.05)

            async def work(attempt: int = attempt) -> None:
                async with locks.lock(f"free{attempt}", ttl=0.03) as lease:
                    sessions.add(lease.session)
                    async with locks.lock(f"busy{attempt}", ttl=0.03, wait=5):
                        await asyncio.sleep(10)

            task = asyncio.ensure_future(work())
            await asyncio.sleep(0.005 * (attempt % 12))
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=1)
            assert done, f"run {attempt} hung after its cancellation"
            await other.release(busy)
        await asyncio.sleep(0.05)
        assert all(held_by(admin, name) == [] for name in sessions if name)
        assert len(locks._refresher._schedule) == 0
        counts = Counts(admin)
        await asyncio.sleep(0.2)
        assert counts["lock.keepalive"] == 0, "no heartbeat left"
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_a_cancelled_waiter_of_a_session_leaves_nothing(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        holder = fencelock.asyncio.Locks(client)
        locks = fencelock.asyncio.Locks(client)
        busy = await holder.acquire("queued", ttl=30)
        waiter = asyncio.ensure_future(
            locks.acquire("queued", ttl=30, wait=5, session=True)
        )
        await asyncio.sleep(0.1)
        info = fencelock.lock_info(admin, "lock:queued")
        assert info is not None and info["waiters"] == 1
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await holder.release(busy)
        await asyncio.sleep(0.05)
        assert admin.exists("lock:queued") == 0, "granted to nobody"
        assert len(locks._refresher._schedule) == 0
        await client.aclose()

    run(main())
    admin.close()
