"""redis-py's own lock tests (its tests/test_lock.py and tests/test_asyncio/
test_lock.py), case by case, run against redis-py's ``Lock`` and the drop-in
``fencelock.asyncio.Lock`` alike (``redis.lock.Lock`` and ``fencelock.Lock`` on the
sync side): every case the drop-in shares passes for both, and each case where they
differ asserts each one's behaviour, so the list of differences in the guide ("How the
drop-in differs from redis-py's Lock") stays true:

- the key is the module's type: ``GET`` of it answers ``WRONGTYPE`` (use
  ``lock.owned()``, ``lock.locked()`` or ``LOCK.INFO``);
- waiting is on the server: a ``blocking_timeout`` is waited in full whatever
  ``sleep`` says, where redis-py gives up as soon as its next poll would come too
  late, and a release during the wait hands the lock on.

A ``release()`` from a thread that has no token is tests/test_redis_py_lock_cases.py
(threads only)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio
import redis.asyncio.lock
from redis.exceptions import LockError, LockNotOwnedError, ResponseError
from servers import Server

import fencelock.asyncio

from .helpers import later

IDS = ["redis-py", "fencelock"]


@pytest.fixture(params=[redis.asyncio.lock.Lock, fencelock.asyncio.Lock], ids=IDS)
def kind(request: pytest.FixtureRequest) -> Any:
    return request.param


def get_lock(r: Any, kind: Any, name: str, **kwargs: Any) -> Any:
    return r.lock(name, lock_class=kind, **kwargs)


async def test_lock_and_release(r: redis.asyncio.Redis, kind: Any) -> None:
    lock = get_lock(r, kind, "foo")
    assert await lock.acquire(blocking=False)
    assert await r.ttl("foo") == -1
    await lock.release()
    assert await r.get("foo") is None


@pytest.mark.parametrize("thread_local", [True, False])
async def test_lock_token(
    r: redis.asyncio.Redis, kind: Any, thread_local: bool
) -> None:
    lock = get_lock(r, kind, "foo", thread_local=thread_local)
    assert await lock.acquire(blocking=False, token="test")
    assert lock.local.token == b"test"
    assert await r.ttl("foo") == -1
    await lock.release()
    assert await r.exists("foo") == 0
    assert lock.local.token is None


async def test_locked(r: redis.asyncio.Redis, kind: Any) -> None:
    lock = get_lock(r, kind, "foo")
    assert await lock.locked() is False
    await lock.acquire(blocking=False)
    assert await lock.locked() is True
    await lock.release()
    assert await lock.locked() is False


@pytest.mark.parametrize("decoded", [False, True])
async def test_owned(
    server: Server, r: redis.asyncio.Redis, kind: Any, decoded: bool
) -> None:
    client = redis.asyncio.Redis(port=server.port, decode_responses=decoded)
    lock = get_lock(client, kind, "foo")
    assert await lock.owned() is False
    await lock.acquire(blocking=False)
    assert await lock.owned() is True
    await lock.release()
    assert await lock.owned() is False
    lock2 = get_lock(client, kind, "foo")
    await lock2.acquire(blocking=False)
    assert await lock.owned() is False
    assert await lock2.owned() is True
    await lock2.release()
    assert await lock2.owned() is False
    await client.aclose()


async def test_competing_locks(r: redis.asyncio.Redis, kind: Any) -> None:
    lock1 = get_lock(r, kind, "foo")
    lock2 = get_lock(r, kind, "foo")
    assert await lock1.acquire(blocking=False)
    assert not await lock2.acquire(blocking=False)
    await lock1.release()
    assert await lock2.acquire(blocking=False)
    assert not await lock1.acquire(blocking=False)
    await lock2.release()


@pytest.mark.parametrize("timeout", [10, 9.5])
async def test_timeout(r: redis.asyncio.Redis, kind: Any, timeout: float) -> None:
    lock = get_lock(r, kind, "foo", timeout=timeout)
    assert await lock.acquire(blocking=False)
    assert 8000 < await r.pttl("foo") <= timeout * 1000
    await lock.release()


async def test_context_manager(r: redis.asyncio.Redis, kind: Any) -> None:
    async with get_lock(r, kind, "foo", blocking_timeout=0.2) as lock:
        assert await lock.owned()
    assert await r.exists("foo") == 0


async def test_context_manager_raises_when_locked_not_acquired(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    await r.set("foo", "bar")
    with pytest.raises(LockError) as raised:
        async with get_lock(r, kind, "foo", blocking_timeout=0.1):
            pass
    # redis-py's asyncio lock raises it unnamed (its sync lock names it).
    name = None if kind is redis.asyncio.lock.Lock else "foo"  # sync: name = "foo"
    assert raised.value.lock_name == name


async def test_releasing_unlocked_lock_raises_error(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    with pytest.raises(LockError):
        await get_lock(r, kind, "foo").release()


async def test_releasing_lock_no_longer_owned_raises_error(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    lock = get_lock(r, kind, "foo")
    await lock.acquire(blocking=False)
    await r.set("foo", "a")
    with pytest.raises(LockNotOwnedError, match="no longer owned"):
        await lock.release()
    assert lock.local.token is None


@pytest.mark.parametrize(
    ("extra", "replace", "low", "high"),
    [(10, False, 16000, 20000), (10.0, False, 16000, 20000), (10, True, 8000, 10000)],
)
async def test_extend(
    r: redis.asyncio.Redis,
    kind: Any,
    extra: float,
    replace: bool,
    low: int,
    high: int,
) -> None:
    lock = get_lock(r, kind, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    assert await lock.extend(extra, replace_ttl=replace)
    assert low < await r.pttl("foo") <= high
    await lock.release()


async def test_extend_and_reacquire_errors(r: redis.asyncio.Redis, kind: Any) -> None:
    unlocked = get_lock(r, kind, "foo", timeout=10)
    with pytest.raises(LockError):
        await unlocked.extend(10)
    with pytest.raises(LockError):
        await unlocked.reacquire()
    forever = get_lock(r, kind, "foo")
    assert await forever.acquire(blocking=False)
    with pytest.raises(LockError):
        await forever.extend(10)
    with pytest.raises(LockError):
        await forever.reacquire()
    await forever.release()


async def test_extend_and_reacquire_no_longer_owned(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    lock = get_lock(r, kind, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    await r.set("foo", "a")
    with pytest.raises(LockNotOwnedError):
        await lock.extend(10)
    with pytest.raises(LockNotOwnedError):
        await lock.reacquire()


async def test_reacquire(r: redis.asyncio.Redis, kind: Any) -> None:
    lock = get_lock(r, kind, "foo", timeout=10)
    assert await lock.acquire(blocking=False)
    assert await r.pexpire("foo", 5000)
    assert await r.pttl("foo") <= 5000
    assert await lock.reacquire()
    assert 8000 < await r.pttl("foo") <= 10000
    await lock.release()


async def test_context_manager_no_longer_owned(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    with pytest.raises(LockNotOwnedError):
        async with get_lock(r, kind, "foo", timeout=10, blocking=False):
            await r.set("foo", "a")


async def test_blocking_timeout_returns_false(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    holder = get_lock(r, kind, "foo")
    assert await holder.acquire(blocking=False)
    waiter = get_lock(r, kind, "foo", sleep=0.05, blocking_timeout=0.2)
    assert not await waiter.acquire()
    await holder.release()


async def test_the_shared_cases_in_one_run(r: redis.asyncio.Redis, kind: Any) -> None:
    """redis-py's asyncio file's cases the two share, one after the other on one
    lock."""
    lock = get_lock(r, kind, "foo", timeout=10)
    assert await lock.locked() is False
    assert await lock.acquire(blocking=False, token="test")
    assert lock.local.token == b"test"
    assert await lock.owned() and await lock.locked()
    assert not await get_lock(r, kind, "foo").acquire(blocking=False)
    assert await lock.extend(10)
    assert 16000 < await r.pttl("foo") <= 20000
    assert await lock.reacquire()
    await lock.release()
    assert await r.exists("foo") == 0
    with pytest.raises(LockError):
        await lock.release()
    assert await lock.acquire(blocking=False)
    await r.set("foo", "a")
    with pytest.raises(LockNotOwnedError):
        await lock.release()


# -- where they differ ---------------------------------------------------------------


async def test_difference_get_of_the_key(r: redis.asyncio.Redis, kind: Any) -> None:
    """redis-py's key is a string holding the token; the drop-in's is the module's
    type, which ``GET`` refuses."""
    lock = get_lock(r, kind, "foo")
    assert await lock.acquire(blocking=False, token="test")
    if kind is redis.asyncio.lock.Lock:
        assert await r.get("foo") == b"test"
    else:
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await r.get("foo")
        info = await fencelock.asyncio.lock_info(r, "foo")
        assert info is not None and info["mode"] == "exclusive"
    assert await lock.owned() and await lock.locked()
    await lock.release()


async def test_difference_sleep_longer_than_blocking_timeout(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    """``sleep=60, blocking_timeout=1``: redis-py gives up at once (its next poll
    would come after the timeout); the drop-in waits in the server's queue for the
    whole second, and would have been granted the lock had it been released."""
    holder = get_lock(r, kind, "foo")
    assert await holder.acquire(blocking=False)
    start = time.monotonic()
    waiter = get_lock(r, kind, "foo", sleep=60, blocking_timeout=1)
    assert not await waiter.acquire()
    waited = time.monotonic() - start
    if kind is redis.asyncio.lock.Lock:
        assert waited < 1
    else:
        assert waited >= 1
    await holder.release()


async def test_difference_get_and_sleep_in_one_run(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    """The two differences above, one after the other on one held lock."""
    holder = get_lock(r, kind, "foo")
    assert await holder.acquire(blocking=False, token="test")
    if kind is redis.asyncio.lock.Lock:
        assert await r.get("foo") == b"test"
    else:
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await r.get("foo")
    start = time.monotonic()
    waiter = get_lock(r, kind, "foo", sleep=60, blocking_timeout=1)
    assert not await waiter.acquire()
    waited = time.monotonic() - start
    assert (waited >= 1) is (kind is fencelock.asyncio.Lock)
    await holder.release()


async def test_difference_a_release_during_the_wait(
    r: redis.asyncio.Redis, kind: Any
) -> None:
    """A release while ``sleep=60, blocking_timeout=5`` waits: the drop-in is granted
    the lock (the server hands it on); redis-py had given up before."""
    holder = get_lock(r, kind, "foo", thread_local=False)
    assert await holder.acquire(blocking=False)
    later(0.2, holder.release)
    waiter = get_lock(r, kind, "foo", sleep=60, blocking_timeout=5)
    got = await waiter.acquire()
    assert got is (kind is fencelock.asyncio.Lock)
    if got:
        await waiter.release()
