"""``fencelock.asyncio.Locks`` against a real server, what only tasks do: a cancelled
block and a timeout around it release the lock and leave no refresh running. What
both sides do is tests/_async/test_locks.py (the sync side generated from it)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import redis.asyncio
from conftest import async_client, run

from fencelock.asyncio import Locks


def scenario(url: str, body: Any, **client_kwargs: Any) -> None:
    async def main() -> None:
        client = async_client(url, **client_kwargs)
        try:
            await body(client, Locks(client))
        finally:
            await client.aclose()

    run(main())


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
