"""What only asyncio has, for ``fencelock.asyncio.Lock``: a cancelled wait leaves
nothing held, and a cancellation during an acquire is never lost. The cases both
sides share are in ``tests/_async/test_lock.py`` (``tests/_sync`` generated)."""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
from typing import Any

import pytest
import redis.asyncio
from conftest import async_client, run

from fencelock.asyncio import Lock


def get_lock(client: redis.asyncio.Redis, *args: Any, **kwargs: Any) -> Lock:
    kwargs["lock_class"] = Lock
    lock = client.lock(*args, **kwargs)
    assert isinstance(lock, Lock)
    return lock


async def holder_fence(client: redis.asyncio.Redis, name: str, token: Any) -> Any:
    return await client.execute_command("LOCK.FENCE", name, token)


def scenario(url: str, body: Any, **client_kwargs: Any) -> None:
    async def main() -> None:
        client = async_client(url, **client_kwargs)
        try:
            await body(client)
        finally:
            await client.aclose()

    run(main())


def test_a_cancelled_wait_leaves_nothing_held(url: str) -> None:
    """The waiter's task is cancelled while it waits in the server's queue: when the
    holder releases, the lock must be free, not granted to the cancelled waiter."""

    async def body(r: redis.asyncio.Redis) -> None:
        holder = get_lock(r, "foo", timeout=10)
        assert await holder.acquire(blocking=False)
        waiter = get_lock(r, "foo", timeout=10)
        task = asyncio.ensure_future(waiter.acquire(blocking_timeout=10))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await holder.release()
        await asyncio.sleep(0.1)
        assert await r.exists("foo") == 0
        assert await r.execute_command("LOCK.INFO", "foo") is None

    scenario(url, body)


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="without Task.cancelling() (3.11) a swallowed cancellation is invisible",
)
def test_a_cancel_during_acquire_is_never_lost(url: str) -> None:
    """A cancel that lands as redis-py finishes a send is swallowed by Python 3.11's
    ``asyncio.wait_for`` (redis-py wraps every send in it when a socket timeout is
    set): the acquire re-raises it and gives the grant back, so a timeout around an
    acquire cannot be lost. A task that acquires in a loop must end when cancelled."""

    async def body(r: redis.asyncio.Redis) -> None:
        for attempt in range(30):

            async def acquire_forever(attempt: int = attempt) -> None:
                for n in itertools.count():
                    lock = get_lock(r, f"foo{attempt}-{n}", timeout=10)
                    await lock.acquire(blocking=False)

            task = asyncio.ensure_future(acquire_forever())
            await asyncio.sleep(random.uniform(0.001, 0.01))
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=0.5)
            assert done, "the cancellation was lost"
            assert task.cancelled()

    scenario(url, body, socket_timeout=5)
