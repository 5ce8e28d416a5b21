"""What only asyncio has, for the telemetry: an acquire whose caller stopped waiting
(``asyncio.wait_for`` running out, the task cancelled) ends with its own outcome,
``cancelled``, neither an error nor the lock's answer. The cases both sides share are
in ``tests/_async/test_telemetry.py`` (``tests/_sync`` generated)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio
from conftest import async_client, run
from servers import Server
from telemetry_capture import clear, count, spans

import fencelock.asyncio


def test_a_wait_cancelled_by_wait_for_is_cancelled_not_an_error(
    server: Server, r: redis.Redis
) -> None:
    async def body(client: redis.asyncio.Redis) -> None:
        clear()
        locks = fencelock.asyncio.Locks(client, session=False)
        holder = await locks.acquire("cancelled", ttl=30)
        errors_before = count("fencelock.wait.duration", fencelock_outcome="error")
        cancelled_before = count(
            "fencelock.wait.duration", fencelock_outcome="cancelled"
        )
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(locks.acquire("cancelled", ttl=30, wait=30), 0.2)
        drop_in = fencelock.asyncio.Lock(client, "lock:cancelled", timeout=30)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(drop_in.acquire(blocking_timeout=30), 0.2)
        await locks.release(holder)
        _granted, *cancelled = spans("LOCK.ACQUIRE", "lock:cancelled")
        assert len(cancelled) == 2
        for span in cancelled:
            attributes = dict(span.attributes or {})
            assert attributes["fencelock.outcome"] == "cancelled"
            assert attributes["fencelock.wait.timeout"] == 30.0
            assert "error.type" not in attributes
            assert span.status.status_code.name == "UNSET"
        assert count("fencelock.wait.duration", fencelock_outcome="error") == (
            errors_before
        )
        assert (
            count("fencelock.wait.duration", fencelock_outcome="cancelled")
            == cancelled_before + 2
        )
        await locks.aclose()

    async def main() -> None:
        client = async_client(server.url)
        try:
            await body(client)
        finally:
            await client.aclose()

    run(main())
