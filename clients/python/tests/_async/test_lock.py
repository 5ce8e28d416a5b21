"""``fencelock.asyncio.Lock`` against a real server, checked the way redis-py's own
``tests/test_lock.py`` and ``tests/test_asyncio/test_lock.py`` check its locks: same
calls, same results, same exceptions. Where redis-py reads the key with ``GET``,
these ask the module who holds it (``LOCK.FENCE key token``), since a lock key is of
type ``fencelock``."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio
from redis.exceptions import LockError, LockNotOwnedError

import fencelock.asyncio

from .helpers import later, sleep


def get_lock(
    client: redis.asyncio.Redis, *args: Any, **kwargs: Any
) -> fencelock.asyncio.Lock:
    kwargs["lock_class"] = fencelock.asyncio.Lock
    lock = client.lock(*args, **kwargs)
    assert isinstance(lock, fencelock.asyncio.Lock)
    return lock


async def holder_fence(client: redis.asyncio.Redis, name: str, token: Any) -> Any:
    return await client.execute_command("LOCK.FENCE", name, token)


async def test_lock(any_r: redis.asyncio.Redis) -> None:
    lock = get_lock(any_r, "foo")
    assert await lock.acquire(blocking=False)
    assert await holder_fence(any_r, "foo", lock.local.token) == lock.fence
    assert await any_r.type("foo") in (b"fencelock", "fencelock")
    assert await any_r.ttl("foo") == -1, "no timeout: no expiry, as redis-py"
    await lock.release()
    assert await any_r.exists("foo") == 0


async def test_lock_token(any_r: redis.asyncio.Redis) -> None:
    lock = get_lock(any_r, "foo")
    assert await lock.acquire(blocking=False, token="test")
    assert lock.local.token == b"test"
    assert await holder_fence(any_r, "foo", "test") == lock.fence
    assert await any_r.ttl("foo") == -1
    await lock.release()
    assert await any_r.exists("foo") == 0
    assert lock.local.token is None


async def test_lock_token_thread_local_false(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", thread_local=False)
    assert await lock.acquire(blocking=False, token=b"test")
    assert lock.local.token == b"test"
    await lock.release()
    assert lock.local.token is None


async def test_generated_tokens_are_128_random_bits(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo")
    tokens = set()
    for _ in range(3):
        assert await lock.acquire(blocking=False)
        tokens.add(lock.local.token)
        await lock.release()
    assert len(tokens) == 3
    for token in tokens:
        assert len(token) == 32 and int(token, 16) >= 0


async def test_fences_increase_with_every_grant(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    fences: list[Any] = []
    for _ in range(3):
        assert await lock.acquire(blocking=False)
        fences.append(lock.fence)
        await lock.release()
    assert fences == sorted(fences) and len(set(fences)) == 3


async def test_locked(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo")
    assert await lock.locked() is False
    await lock.acquire(blocking=False)
    assert await lock.locked() is True
    await lock.release()
    assert await lock.locked() is False


async def test_owned(any_r: redis.asyncio.Redis) -> None:
    lock = get_lock(any_r, "foo")
    assert await lock.owned() is False
    await lock.acquire(blocking=False)
    assert await lock.owned() is True
    await lock.release()
    assert await lock.owned() is False

    lock2 = get_lock(any_r, "foo")
    assert await lock.owned() is False
    assert await lock2.owned() is False
    await lock2.acquire(blocking=False)
    assert await lock.owned() is False
    assert await lock2.owned() is True
    await lock2.release()
    assert await lock.owned() is False
    assert await lock2.owned() is False


async def test_competing_locks(r: redis.asyncio.Redis) -> None:
    lock1 = get_lock(r, "foo")
    lock2 = get_lock(r, "foo")
    assert await lock1.acquire(blocking=False)
    assert not await lock2.acquire(blocking=False)
    await lock1.release()
    assert await lock2.acquire(blocking=False)
    assert not await lock1.acquire(blocking=False)
    assert lock2.fence is not None and lock1.fence is not None
    assert lock2.fence > lock1.fence
    await lock2.release()


async def test_timeout(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    assert 8 < await r.ttl("foo") <= 10
    await lock.release()


async def test_float_timeout(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=9.5)
    assert await lock.acquire(blocking=False)
    assert 8000 < await r.pttl("foo") <= 9500
    await lock.release()


async def test_blocking(r: redis.asyncio.Redis) -> None:
    blocking = False
    lock = get_lock(r, "foo", blocking=blocking)
    assert not lock.blocking
    lock_2 = get_lock(r, "foo")
    assert lock_2.blocking


async def test_blocking_timeout(r: redis.asyncio.Redis) -> None:
    lock1 = get_lock(r, "foo")
    assert await lock1.acquire(blocking=False)
    bt = 0.4
    lock2 = get_lock(r, "foo", blocking_timeout=bt)
    start = time.monotonic()
    assert not await lock2.acquire()
    assert bt <= time.monotonic() - start < bt + 0.3
    lock3 = get_lock(r, "foo", blocking_timeout=60)
    start = time.monotonic()
    assert not await lock3.acquire(blocking_timeout=0.1), (
        "the argument overrides the lock's"
    )
    assert time.monotonic() - start < 1
    await lock1.release()


async def test_blocking_timeout_zero_is_one_try(r: redis.asyncio.Redis) -> None:
    """The server's BLOCK 0 would wait forever; redis-py's blocking_timeout=0 tries
    once."""
    lock1 = get_lock(r, "foo")
    assert await lock1.acquire(blocking=False)
    start = time.monotonic()
    assert not await get_lock(r, "foo", blocking_timeout=0).acquire()
    assert not await get_lock(r, "foo").acquire(blocking_timeout=0.0001)
    assert not await get_lock(r, "foo", sleep=0.05).acquire(blocking_timeout=0)
    assert time.monotonic() - start < 0.5
    await lock1.release()


async def test_blocking_acquire_is_granted_on_release(r: redis.asyncio.Redis) -> None:
    holder = get_lock(r, "foo", timeout=10, thread_local=False)
    assert await holder.acquire(blocking=False)
    later(0.2, holder.release)
    waiter = get_lock(r, "foo", timeout=10)
    start = time.monotonic()
    assert await waiter.acquire(blocking_timeout=5)
    assert 0.15 < time.monotonic() - start < 2
    assert holder.fence is not None and waiter.fence is not None
    assert waiter.fence > holder.fence
    await waiter.release()


async def test_context_manager(r: redis.asyncio.Redis) -> None:
    # blocking_timeout prevents a deadlock if the lock can't be acquired
    # for some reason
    async with get_lock(r, "foo", blocking_timeout=0.2) as lock:
        assert await holder_fence(r, "foo", lock.local.token) == lock.fence
    assert await r.exists("foo") == 0


async def test_context_manager_blocking_timeout(r: redis.asyncio.Redis) -> None:
    async with get_lock(r, "foo", blocking=False):
        bt = 0.4
        lock2 = get_lock(r, "foo", blocking_timeout=bt)
        start = time.monotonic()
        assert not await lock2.acquire()
        assert bt <= time.monotonic() - start


async def test_context_manager_raises_when_locked_not_acquired(
    r: redis.asyncio.Redis,
) -> None:
    other = get_lock(r, "foo")
    await other.acquire(blocking=False)
    lock = get_lock(r, "foo", blocking_timeout=0.1)
    with pytest.raises(LockError, match="Unable to acquire lock"):
        async with lock:
            pass


async def test_context_manager_not_raise_on_release_lock_not_owned_error(
    r: redis.asyncio.Redis,
) -> None:
    try:
        # Built directly: redis-py < 6's lock() has no raise_on_release_error.
        async with fencelock.asyncio.Lock(
            r, "foo", timeout=0.1, raise_on_release_error=False
        ):
            await sleep(0.15)
    except LockNotOwnedError:
        pytest.fail("LockNotOwnedError should not have been raised")

    with pytest.raises(LockNotOwnedError):
        async with get_lock(r, "foo", timeout=0.1):
            await sleep(0.15)


async def test_context_manager_not_raise_on_release_lock_error(
    r: redis.asyncio.Redis,
) -> None:
    try:
        async with fencelock.asyncio.Lock(
            r, "foo", timeout=0.1, raise_on_release_error=False
        ) as lock:
            await lock.release()
    except LockError:
        pytest.fail("LockError should not have been raised")

    with pytest.raises(LockError):
        async with get_lock(r, "foo", timeout=0.1) as lock:
            await lock.release()


async def test_a_key_of_another_type_is_busy(r: redis.asyncio.Redis) -> None:
    """redis-py's SET NX finds any value busy; the module answers WRONGTYPE, which the
    lock reads the same way (and a plain SET lock of a client not yet migrated keeps
    its meaning)."""
    await r.set("foo", "bar")
    lock = get_lock(r, "foo", timeout=10)
    assert not await lock.acquire(blocking=False)
    start = time.monotonic()
    assert not await lock.acquire(blocking_timeout=0.3)
    assert time.monotonic() - start >= 0.2
    with pytest.raises(LockError, match="Unable to acquire lock"):
        async with get_lock(r, "foo", blocking_timeout=0.1):
            pass
    assert await lock.locked() is True
    assert await lock.owned() is False
    later(0.2, r.delete, "foo")
    assert await lock.acquire(blocking_timeout=3), "the key went away while polling"
    assert await lock.owned()
    await lock.release()


async def test_releasing_unlocked_lock_raises_error(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo")
    with pytest.raises(LockError, match="not owned or is already unlocked"):
        await lock.release()


async def test_releasing_lock_no_longer_owned_raises_error(
    r: redis.asyncio.Redis,
) -> None:
    lock = get_lock(r, "foo")
    await lock.acquire(blocking=False)
    # the lock changes hands behind its back
    await r.delete("foo")
    await r.execute_command("LOCK.ACQUIRE", "foo", 10000, "TOKEN", "a")
    with pytest.raises(LockNotOwnedError, match="no longer owned"):
        await lock.release()
    # even though we errored, the token is still cleared
    assert lock.local.token is None
    assert await holder_fence(r, "foo", "a") is not None, "someone else's lock stays"


async def test_releasing_over_a_key_of_another_type_is_not_owned(
    r: redis.asyncio.Redis,
) -> None:
    lock = get_lock(r, "foo")
    await lock.acquire(blocking=False)
    await r.delete("foo")
    await r.set("foo", "a")
    with pytest.raises(LockNotOwnedError):
        await lock.release()


async def test_extend_lock(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    assert 8000 < await r.pttl("foo") <= 10000
    assert await lock.extend(10)
    assert 16000 < await r.pttl("foo") <= 20000
    await lock.release()


async def test_extend_lock_replace_ttl(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    assert 8000 < await r.pttl("foo") <= 10000
    assert await lock.extend(10, replace_ttl=True)
    assert 8000 < await r.pttl("foo") <= 10000
    await lock.release()


async def test_extend_lock_float(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10.5)
    assert await lock.acquire(blocking=False)
    assert 10000 < await r.pttl("foo") <= 10500
    assert await lock.extend(10.5)
    assert 16000 < await r.pttl("foo") <= 21000
    await lock.release()


async def test_extend_adds_to_what_is_left(r: redis.asyncio.Redis) -> None:
    """Added to the lease left, as redis-py's Lua script does: not to the timeout."""
    lock = get_lock(r, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    await r.pexpire("foo", 3000)
    assert await lock.extend(2)
    assert 4000 < await r.pttl("foo") <= 5000
    await lock.release()


async def test_extending_unlocked_lock_raises_error(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    with pytest.raises(LockError, match="Cannot extend an unlocked lock"):
        await lock.extend(10)


async def test_extending_lock_with_no_timeout_raises_error(
    r: redis.asyncio.Redis,
) -> None:
    lock = get_lock(r, "foo")
    assert await lock.acquire(blocking=False)
    with pytest.raises(LockError, match="no timeout"):
        await lock.extend(10)
    await lock.release()


async def test_extending_lock_no_longer_owned_raises_error(
    r: redis.asyncio.Redis,
) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    await r.delete("foo")
    await r.execute_command("LOCK.ACQUIRE", "foo", 10000, "TOKEN", "a")
    with pytest.raises(LockNotOwnedError, match="Cannot extend a lock"):
        await lock.extend(10)
    with pytest.raises(LockNotOwnedError):
        await lock.extend(10, replace_ttl=True)


async def test_reacquire_lock(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    assert await r.pexpire("foo", 5000)
    assert await r.pttl("foo") <= 5000
    assert await lock.reacquire()
    assert 8000 < await r.pttl("foo") <= 10000
    await lock.release()


async def test_reacquiring_unlocked_lock_raises_error(r: redis.asyncio.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    with pytest.raises(LockError, match="Cannot reacquire an unlocked lock"):
        await lock.reacquire()


async def test_reacquiring_lock_with_no_timeout_raises_error(
    r: redis.asyncio.Redis,
) -> None:
    lock = get_lock(r, "foo")
    assert await lock.acquire(blocking=False)
    with pytest.raises(LockError, match="no timeout"):
        await lock.reacquire()
    await lock.release()


async def test_reacquiring_lock_no_longer_owned_raises_error(
    r: redis.asyncio.Redis,
) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    await r.delete("foo")
    with pytest.raises(LockNotOwnedError, match="Cannot reacquire a lock"):
        await lock.reacquire()


async def test_lock_class_argument(r: redis.asyncio.Redis) -> None:
    # redis-py's asyncio annotations name its own Lock class here.
    lock: Any = r.lock("foo", lock_class=fencelock.asyncio.Lock)  # type: ignore[arg-type]
    assert type(lock) is fencelock.asyncio.Lock
