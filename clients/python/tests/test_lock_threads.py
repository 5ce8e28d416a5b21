"""``fencelock.Lock``'s tokens across threads, as redis-py's ``thread_local``
documents them: a case of threads only, so written here by hand rather than generated
from ``tests/_async`` (an asyncio lock's tasks share one thread)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from redis.exceptions import LockNotOwnedError

import fencelock


def get_lock(client: redis.Redis, *args: Any, **kwargs: Any) -> fencelock.Lock:
    kwargs["lock_class"] = fencelock.Lock
    lock = client.lock(*args, **kwargs)
    assert isinstance(lock, fencelock.Lock)
    return lock


def test_thread_local_token_is_not_shared(r: redis.Redis) -> None:
    """The scenario of redis-py's docstring: thread 2 must not release with thread 1's
    token, nor thread 1 with the token thread 2 got after thread 1's lease ended."""
    lock = get_lock(r, "foo", timeout=0.2)
    assert lock.acquire(blocking=False)
    seen: dict[str, Any] = {}

    def other_thread() -> None:
        seen["token"] = getattr(lock.local, "token", None)
        seen["owned"] = lock.owned()
        seen["acquired"] = lock.acquire(blocking_timeout=2)

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()
    assert seen == {"token": None, "owned": False, "acquired": True}
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert r.exists("foo") == 1, "thread 2's holding is untouched"


def test_thread_local_false_shares_the_token(r: redis.Redis) -> None:
    lock = get_lock(r, "foo", timeout=10, thread_local=False)
    assert lock.acquire(blocking=False)
    worker = threading.Thread(target=lock.release)
    worker.start()
    worker.join()
    assert r.exists("foo") == 0
