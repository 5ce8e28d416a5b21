"""A failure after the grant, while a ``lock`` block is being entered (its watch could
not start: the refresher failed, say), leaves nothing behind: the lock is released and
its session does not keep it alive, on both sides, with a session and without."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from conftest import async_client, run

import fencelock
import fencelock._async._refresher
import fencelock._sync._refresher
import fencelock.asyncio


class WatchFailed(Exception):
    pass


def failing_add(self: Any, lease: Any, refresh: bool) -> None:
    raise WatchFailed("the watch could not start")


@pytest.mark.parametrize("session", [True, False], ids=["session", "own-lease"])
def test_a_block_that_cannot_start_leaves_its_lock_free(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, session: bool
) -> None:
    locks = fencelock.Locks(r)
    monkeypatch.setattr(fencelock._sync._refresher.Refresher, "add", failing_add)
    with pytest.raises(WatchFailed), locks.lock("entry", ttl=1, session=session):
        pytest.fail("the block ran")
    assert locks.info("entry") is None
    monkeypatch.undo()
    # Not kept alive either: another manager takes it at once.
    with fencelock.Locks(r).lock("entry", ttl=1):
        pass
    locks.close()


@pytest.mark.parametrize("session", [True, False], ids=["session", "own-lease"])
def test_asyncio_a_block_that_cannot_start_leaves_its_lock_free(
    url: str, monkeypatch: pytest.MonkeyPatch, session: bool
) -> None:
    async def body() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        with monkeypatch.context() as patched:
            patched.setattr(fencelock._async._refresher.Refresher, "add", failing_add)
            with pytest.raises(WatchFailed):
                async with locks.lock("entry", ttl=1, session=session):
                    pytest.fail("the block ran")
        assert await locks.info("entry") is None
        async with fencelock.asyncio.Locks(client).lock("entry", ttl=1):
            pass
        await locks.aclose()
        await asyncio.sleep(0)
        await client.aclose()

    run(body())
