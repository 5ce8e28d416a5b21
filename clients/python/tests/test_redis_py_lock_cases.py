"""redis-py's lock test case of threads, against redis-py's ``Lock`` and the drop-in
``fencelock.Lock`` alike: a ``release()`` from a thread that has no token
(``thread_local=True``) raises ``LockError`` with the drop-in, where redis-py's fails
with ``AttributeError``, a difference the guide lists ("How the drop-in differs from
redis-py's Lock"). Written by hand: a case of threads only (an asyncio lock's tasks
share one thread). Every other case of redis-py's lock tests, and the other
differences, are tests/_async/test_redis_py_lock_cases.py (the sync side generated
from it)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
import redis.lock
from redis.exceptions import LockError, LockNotOwnedError

import fencelock

CLASSES = [redis.lock.Lock, fencelock.Lock]
IDS = ["redis-py", "fencelock"]


@pytest.fixture(params=CLASSES, ids=IDS)
def kind(request: pytest.FixtureRequest) -> Any:
    return request.param


def get_lock(r: redis.Redis, kind: Any, name: str, **kwargs: Any) -> Any:
    return r.lock(name, lock_class=kind, **kwargs)


def test_difference_a_release_from_another_thread(r: redis.Redis, kind: Any) -> None:
    """With ``thread_local=True`` (the default) another thread has no token:
    redis-py's ``release()`` there fails on the attribute it lacks
    (``AttributeError``), the drop-in's raises ``LockError`` ("not owned"). The lock
    stays held either way."""
    lock = get_lock(r, kind, "foo", timeout=10)
    assert lock.acquire(blocking=False)
    raised: list[BaseException] = []

    def release() -> None:
        try:
            lock.release()
        except Exception as error:
            raised.append(error)

    thread = threading.Thread(target=release)
    thread.start()
    thread.join()
    assert len(raised) == 1, raised
    if kind is redis.lock.Lock:
        assert isinstance(raised[0], AttributeError), repr(raised[0])
    else:
        assert isinstance(raised[0], LockError), repr(raised[0])
        assert not isinstance(raised[0], LockNotOwnedError)
    assert lock.owned()
    lock.release()
