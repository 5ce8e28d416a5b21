"""The lock managers (``fencelock.asyncio.Locks``) with ``shared=True`` and
``limit=n``, what only asyncio has: tasks of one loop waiting across modes, and a
cancelled shared wait that leaves nothing behind. Written by hand (tasks, and
cancellation, have no twin among threads); what both sides do alike is
tests/_async/test_shared_locks.py (the sync side generated from it)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import async_client, run

import fencelock
import fencelock.asyncio


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
