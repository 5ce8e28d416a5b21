# Generated from tests/_async/test_lock.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""``fencelock.Lock`` against a real server, checked the way redis-py's own
``tests/test_lock.py`` and ``tests/test_asyncio/test_lock.py`` check its locks: same
calls, same results, same exceptions. Where redis-py reads the key with ``GET``,
these ask the module who holds it (``LOCK.FENCE key token``), since a lock key is of
type ``fencelock``."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError

import fencelock

from .helpers import later, sleep


def get_lock(client: redis.Redis, *args: Any, **kwargs: Any) -> fencelock.Lock:
    kwargs["lock_class"] = fencelock.Lock
    lock = client.lock(*args, **kwargs)
    assert isinstance(lock, fencelock.Lock)
    return lock


def holder_fence(client: redis.Redis, name: str, token: Any) -> Any:
    return client.execute_command("LOCK.FENCE", name, token)


def test_lock(any_r: redis.Redis) -> None:
    lock = get_lock(any_r, "foo")
    assert lock.acquire(blocking=False)
    assert holder_fence(any_r, "foo", lock.local.token) == lock.fence
    assert any_r.type("foo") in (b"fencelock", "fencelock")
    assert any_r.ttl("foo") == -1, "no timeout: no expiry, as redis-py"
    lock.release()
    assert any_r.exists("foo") == 0


def test_lock_token(any_r: redis.Redis) -> None:
    lock = get_lock(any_r, "foo")
    assert lock.acquire(blocking=False, token="test")
    assert lock.local.token == b"test"
    assert holder_fence(any_r, "foo", "test") == lock.fence
    assert any_r.ttl("foo") == -1
    lock.release()
    assert any_r.exists("foo") == 0
    assert lock.local.token is None


def test_lock_token_thread_local_false(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", thread_local=False)
    assert lock.acquire(blocking=False, token=b"test")
    assert lock.local.token == b"test"
    lock.release()
    assert lock.local.token is None


def test_generated_tokens_are_128_random_bits(r: redis.Redis) -> None:
    lock = get_lock(r, "foo")
    tokens = set()
    for _ in range(3):
        assert lock.acquire(blocking=False)
        tokens.add(lock.local.token)
        lock.release()
    assert len(tokens) == 3
    for token in tokens:
        assert len(token) == 32 and int(token, 16) >= 0


def test_fences_increase_with_every_grant(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    fences: list[Any] = []
    for _ in range(3):
        assert lock.acquire(blocking=False)
        fences.append(lock.fence)
        lock.release()
    assert fences == sorted(fences) and len(set(fences)) == 3


def test_locked(r: redis.Redis) -> None:
    lock = get_lock(r, "foo")
    assert lock.locked() is False
    lock.acquire(blocking=False)
    assert lock.locked() is True
    lock.release()
    assert lock.locked() is False


def test_owned(any_r: redis.Redis) -> None:
    lock = get_lock(any_r, "foo")
    assert lock.owned() is False
    lock.acquire(blocking=False)
    assert lock.owned() is True
    lock.release()
    assert lock.owned() is False

    lock2 = get_lock(any_r, "foo")
    assert lock.owned() is False
    assert lock2.owned() is False
    lock2.acquire(blocking=False)
    assert lock.owned() is False
    assert lock2.owned() is True
    lock2.release()
    assert lock.owned() is False
    assert lock2.owned() is False


def test_competing_locks(r: redis.Redis) -> None:
    lock1 = get_lock(r, "foo")
    lock2 = get_lock(r, "foo")
    assert lock1.acquire(blocking=False)
    assert not lock2.acquire(blocking=False)
    lock1.release()
    assert lock2.acquire(blocking=False)
    assert not lock1.acquire(blocking=False)
    assert lock2.fence is not None and lock1.fence is not None
    assert lock2.fence > lock1.fence
    lock2.release()


def test_timeout(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert 8 < r.ttl("foo") <= 10
    lock.release()


def test_float_timeout(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=9.5)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl("foo") <= 9500
    lock.release()


def test_blocking(r: redis.Redis) -> None:
    blocking = False
    lock = get_lock(r, "foo", blocking=blocking)
    assert not lock.blocking
    lock_2 = get_lock(r, "foo")
    assert lock_2.blocking


def test_blocking_timeout(r: redis.Redis) -> None:
    lock1 = get_lock(r, "foo")
    assert lock1.acquire(blocking=False)
    bt = 0.4
    lock2 = get_lock(r, "foo", blocking_timeout=bt)
    start = time.monotonic()
    assert not lock2.acquire()
    assert bt <= time.monotonic() - start < bt + 0.3
    lock3 = get_lock(r, "foo", blocking_timeout=60)
    start = time.monotonic()
    assert not lock3.acquire(blocking_timeout=0.1), "the argument overrides the lock's"
    assert time.monotonic() - start < 1
    lock1.release()


def test_blocking_timeout_zero_is_one_try(r: redis.Redis) -> None:
    """The server's BLOCK 0 would wait forever; redis-py's blocking_timeout=0 tries
    once."""
    lock1 = get_lock(r, "foo")
    assert lock1.acquire(blocking=False)
    start = time.monotonic()
    assert not get_lock(r, "foo", blocking_timeout=0).acquire()
    assert not get_lock(r, "foo").acquire(blocking_timeout=0.0001)
    assert not get_lock(r, "foo", sleep=0.05).acquire(blocking_timeout=0)
    assert time.monotonic() - start < 0.5
    lock1.release()


def test_blocking_acquire_is_granted_on_release(r: redis.Redis) -> None:
    holder = get_lock(r, "foo", timeout=10, thread_local=False)
    assert holder.acquire(blocking=False)
    later(0.2, holder.release)
    waiter = get_lock(r, "foo", timeout=10)
    start = time.monotonic()
    assert waiter.acquire(blocking_timeout=5)
    assert 0.15 < time.monotonic() - start < 2
    assert holder.fence is not None and waiter.fence is not None
    assert waiter.fence > holder.fence
    waiter.release()


def test_context_manager(r: redis.Redis) -> None:
    # blocking_timeout prevents a deadlock if the lock can't be acquired
    # for some reason
    with get_lock(r, "foo", blocking_timeout=0.2) as lock:
        assert holder_fence(r, "foo", lock.local.token) == lock.fence
    assert r.exists("foo") == 0


def test_context_manager_blocking_timeout(r: redis.Redis) -> None:
    with get_lock(r, "foo", blocking=False):
        bt = 0.4
        lock2 = get_lock(r, "foo", blocking_timeout=bt)
        start = time.monotonic()
        assert not lock2.acquire()
        assert bt <= time.monotonic() - start


def test_context_manager_raises_when_locked_not_acquired(
    r: redis.Redis,
) -> None:
    other = get_lock(r, "foo")
    other.acquire(blocking=False)
    lock = get_lock(r, "foo", blocking_timeout=0.1)
    with pytest.raises(LockError, match="Unable to acquire lock"):
        with lock:
            pass


def test_context_manager_not_raise_on_release_lock_not_owned_error(
    r: redis.Redis,
) -> None:
    try:
        # Built directly: redis-py < 6's lock() has no raise_on_release_error.
        with fencelock.Lock(r, "foo", timeout=0.1, raise_on_release_error=False):
            sleep(0.15)
    except LockNotOwnedError:
        pytest.fail("LockNotOwnedError should not have been raised")

    with pytest.raises(LockNotOwnedError):
        with get_lock(r, "foo", timeout=0.1):
            sleep(0.15)


def test_context_manager_not_raise_on_release_lock_error(
    r: redis.Redis,
) -> None:
    try:
        with fencelock.Lock(
            r, "foo", timeout=0.1, raise_on_release_error=False
        ) as lock:
            lock.release()
    except LockError:
        pytest.fail("LockError should not have been raised")

    with pytest.raises(LockError):
        with get_lock(r, "foo", timeout=0.1) as lock:
            lock.release()


def test_a_key_of_another_type_is_busy(r: redis.Redis) -> None:
    """redis-py's SET NX finds any value busy; the module answers WRONGTYPE, which the
    lock reads the same way (and a plain SET lock of a client not yet migrated keeps
    its meaning)."""
    r.set("foo", "bar")
    lock = get_lock(r, "foo", timeout=10)
    assert not lock.acquire(blocking=False)
    start = time.monotonic()
    assert not lock.acquire(blocking_timeout=0.3)
    assert time.monotonic() - start >= 0.2
    with pytest.raises(LockError, match="Unable to acquire lock"):
        with get_lock(r, "foo", blocking_timeout=0.1):
            pass
    assert lock.locked() is True
    assert lock.owned() is False
    later(0.2, r.delete, "foo")
    assert lock.acquire(blocking_timeout=3), "the key went away while polling"
    assert lock.owned()
    lock.release()


def test_releasing_unlocked_lock_raises_error(r: redis.Redis) -> None:
    lock = get_lock(r, "foo")
    with pytest.raises(LockError, match="not owned or is already unlocked"):
        lock.release()


def test_releasing_lock_no_longer_owned_raises_error(
    r: redis.Redis,
) -> None:
    lock = get_lock(r, "foo")
    lock.acquire(blocking=False)
    # the lock changes hands behind its back
    r.delete("foo")
    r.execute_command("LOCK.ACQUIRE", "foo", 10000, "TOKEN", "a")
    with pytest.raises(LockNotOwnedError, match="no longer owned"):
        lock.release()
    # even though we errored, the token is still cleared
    assert lock.local.token is None
    assert holder_fence(r, "foo", "a") is not None, "someone else's lock stays"


def test_releasing_over_a_key_of_another_type_is_not_owned(
    r: redis.Redis,
) -> None:
    lock = get_lock(r, "foo")
    lock.acquire(blocking=False)
    r.delete("foo")
    r.set("foo", "a")
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_extend_lock(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl("foo") <= 10000
    assert lock.extend(10)
    assert 16000 < r.pttl("foo") <= 20000
    lock.release()


def test_extend_lock_replace_ttl(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl("foo") <= 10000
    assert lock.extend(10, replace_ttl=True)
    assert 8000 < r.pttl("foo") <= 10000
    lock.release()


def test_extend_lock_float(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10.5)
    assert lock.acquire(blocking=False)
    assert 10000 < r.pttl("foo") <= 10500
    assert lock.extend(10.5)
    assert 16000 < r.pttl("foo") <= 21000
    lock.release()


def test_extend_adds_to_what_is_left(r: redis.Redis) -> None:
    """Added to the lease left, as redis-py's Lua script does: not to the timeout."""
    lock = get_lock(r, "foo", timeout=10)
    assert lock.acquire(blocking=False)
    r.pexpire("foo", 3000)
    assert lock.extend(2)
    assert 4000 < r.pttl("foo") <= 5000
    lock.release()


def test_extending_unlocked_lock_raises_error(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    with pytest.raises(LockError, match="Cannot extend an unlocked lock"):
        lock.extend(10)


def test_extending_lock_with_no_timeout_raises_error(
    r: redis.Redis,
) -> None:
    lock = get_lock(r, "foo")
    assert lock.acquire(blocking=False)
    with pytest.raises(LockError, match="no timeout"):
        lock.extend(10)
    lock.release()


def test_extending_lock_no_longer_owned_raises_error(
    r: redis.Redis,
) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert lock.acquire(blocking=False)
    r.delete("foo")
    r.execute_command("LOCK.ACQUIRE", "foo", 10000, "TOKEN", "a")
    with pytest.raises(LockNotOwnedError, match="Cannot extend a lock"):
        lock.extend(10)
    with pytest.raises(LockNotOwnedError):
        lock.extend(10, replace_ttl=True)


def test_reacquire_lock(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert r.pexpire("foo", 5000)
    assert r.pttl("foo") <= 5000
    assert lock.reacquire()
    assert 8000 < r.pttl("foo") <= 10000
    lock.release()


def test_reacquiring_unlocked_lock_raises_error(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10)
    with pytest.raises(LockError, match="Cannot reacquire an unlocked lock"):
        lock.reacquire()


def test_reacquiring_lock_with_no_timeout_raises_error(
    r: redis.Redis,
) -> None:
    lock = get_lock(r, "foo")
    assert lock.acquire(blocking=False)
    with pytest.raises(LockError, match="no timeout"):
        lock.reacquire()
    lock.release()


def test_reacquiring_lock_no_longer_owned_raises_error(
    r: redis.Redis,
) -> None:
    lock = get_lock(r, "foo", timeout=10)
    assert lock.acquire(blocking=False)
    r.delete("foo")
    with pytest.raises(LockNotOwnedError, match="Cannot reacquire a lock"):
        lock.reacquire()


def test_lock_class_argument(r: redis.Redis) -> None:
    # redis-py's asyncio annotations name its own Lock class here.
    lock: Any = r.lock("foo", lock_class=fencelock.Lock)  # type: ignore[arg-type]
    assert type(lock) is fencelock.Lock
