"""``fencelock.asyncio.Lock`` against a real server, checked the way redis-py's
``tests/test_asyncio/test_lock.py`` checks ``redis.asyncio.lock.Lock``, plus what
asyncio adds: a cancelled wait leaves nothing held."""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
import time
from typing import Any

import pytest
import redis.asyncio
from conftest import async_client, run
from redis.exceptions import LockError, LockNotOwnedError

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


@pytest.mark.parametrize("thread_local", [True, False])
def test_lock_token(url: str, thread_local: bool) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        lock = get_lock(r, "foo", thread_local=thread_local)
        assert await lock.acquire(blocking=False, token="test")
        assert lock.local.token == b"test"
        assert await holder_fence(r, "foo", "test") == lock.fence
        assert await r.ttl("foo") == -1
        await lock.release()
        assert await r.exists("foo") == 0
        assert lock.local.token is None

    scenario(url, body)


@pytest.mark.parametrize("decode_responses", [False, True])
def test_owned(url: str, decode_responses: bool) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        lock = get_lock(r, "foo")
        assert await lock.owned() is False
        await lock.acquire(blocking=False)
        assert await lock.owned() is True
        await lock.release()
        assert await lock.owned() is False

        lock2 = get_lock(r, "foo")
        await lock2.acquire(blocking=False)
        assert await lock.owned() is False
        assert await lock2.owned() is True
        assert await lock2.locked() is True
        await lock2.release()
        assert await lock2.owned() is False
        assert await lock2.locked() is False

    scenario(url, body, decode_responses=decode_responses)


def test_competing_locks_and_timeouts(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        lock1 = get_lock(r, "foo", timeout=9.5)
        lock2 = get_lock(r, "foo")
        assert await lock1.acquire(blocking=False)
        assert 8000 < await r.pttl("foo") <= 9500
        assert not await lock2.acquire(blocking=False)
        await lock1.release()
        assert await lock2.acquire(blocking=False)
        assert not await lock1.acquire(blocking=False)
        assert lock2.fence is not None and lock1.fence is not None
        assert lock2.fence > lock1.fence
        await lock2.release()

    scenario(url, body)


def test_blocking_timeout(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        lock1 = get_lock(r, "foo")
        assert await lock1.acquire(blocking=False)
        bt = 0.3
        lock2 = get_lock(r, "foo", sleep=0.05, blocking_timeout=bt)
        start = time.monotonic()
        assert not await lock2.acquire()
        assert bt <= time.monotonic() - start < bt + 0.3
        start = time.monotonic()
        assert not await lock2.acquire(blocking_timeout=0)
        assert time.monotonic() - start < 0.2
        await lock1.release()

    scenario(url, body)


def test_context_manager(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        async with get_lock(r, "foo", blocking_timeout=0.2) as lock:
            assert await holder_fence(r, "foo", lock.local.token) == lock.fence
        assert await r.exists("foo") == 0

        await r.set("foo", "bar")
        with pytest.raises(LockError, match="Unable to acquire lock"):
            async with get_lock(r, "foo", blocking_timeout=0.1):
                pass

    scenario(url, body)


def test_context_manager_release_errors(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        async with Lock(r, "foo", timeout=0.1, raise_on_release_error=False):
            await asyncio.sleep(0.15)
        with pytest.raises(LockNotOwnedError):
            async with get_lock(r, "foo", timeout=0.1):
                await asyncio.sleep(0.15)

    scenario(url, body)


def test_release_errors(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        lock = get_lock(r, "foo")
        with pytest.raises(LockError, match="not owned or is already unlocked"):
            await lock.release()
        await lock.acquire(blocking=False)
        await r.delete("foo")
        await r.execute_command("LOCK.ACQUIRE", "foo", 10000, "TOKEN", "a")
        with pytest.raises(LockNotOwnedError, match="no longer owned"):
            await lock.release()
        assert lock.local.token is None
        assert await holder_fence(r, "foo", "a") is not None

    scenario(url, body)


def test_extend(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        lock = get_lock(r, "foo", timeout=10)
        with pytest.raises(LockError, match="Cannot extend an unlocked lock"):
            await lock.extend(10)
        assert await lock.acquire(blocking=False)
        assert 8000 < await r.pttl("foo") <= 10000
        assert await lock.extend(10)
        assert 16000 < await r.pttl("foo") <= 20000
        assert await lock.extend(10, replace_ttl=True)
        assert 8000 < await r.pttl("foo") <= 10000
        await r.delete("foo")
        with pytest.raises(LockNotOwnedError, match="Cannot extend a lock"):
            await lock.extend(10)

        no_timeout = get_lock(r, "bar")
        assert await no_timeout.acquire(blocking=False)
        with pytest.raises(LockError, match="no timeout"):
            await no_timeout.extend(10)
        await no_timeout.release()

    scenario(url, body)


def test_reacquire(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        lock = get_lock(r, "foo", timeout=10)
        with pytest.raises(LockError, match="Cannot reacquire an unlocked lock"):
            await lock.reacquire()
        assert await lock.acquire(blocking=False)
        assert await r.pexpire("foo", 5000)
        assert await lock.reacquire()
        assert 8000 < await r.pttl("foo") <= 10000
        await r.delete("foo")
        with pytest.raises(LockNotOwnedError, match="Cannot reacquire a lock"):
            await lock.reacquire()

        no_timeout = get_lock(r, "bar")
        assert await no_timeout.acquire(blocking=False)
        with pytest.raises(LockError, match="no timeout"):
            await no_timeout.reacquire()
        await no_timeout.release()

    scenario(url, body)


def test_a_waiter_is_granted_when_the_holder_releases(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        holder = get_lock(r, "foo", timeout=10)
        waiter = get_lock(r, "foo", timeout=10)
        assert await holder.acquire(blocking=False)

        async def release_later() -> None:
            await asyncio.sleep(0.2)
            await holder.release()

        start = time.monotonic()
        _, granted = await asyncio.gather(release_later(), waiter.acquire())
        assert granted
        assert 0.15 < time.monotonic() - start < 2
        assert waiter.fence is not None and holder.fence is not None
        assert waiter.fence > holder.fence
        await waiter.release()

    scenario(url, body)


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
