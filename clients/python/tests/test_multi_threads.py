"""Two lock managers in two threads, each holding what the other asks for: the
server refuses the second wait at once with ``DEADLOCK``. Written by hand for threads
(their events and joins); ``tests/test_asyncio_multi.py`` has the same case between
two tasks, and the cases both sides share are in ``tests/_async/test_multi.py``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from _sync.helpers import spawn
from redis.exceptions import LockError
from servers import wait_until

import fencelock
from fencelock import Deadlock, Locks


def waiters(client: Any, key: str) -> int:
    info = fencelock.lock_info(client, key)
    return 0 if info is None else info["waiters"]


@pytest.mark.parametrize("second_asks_with", ["lock", "lock_all"])
def test_two_sessions_each_holding_what_the_other_asks_for(
    r: redis.Redis, second_asks_with: str
) -> None:
    """Session one holds a and waits for b (and c); session two holds b and asks for
    a: the server refuses two's wait at once with DEADLOCK, nothing queued; once two
    lets go of b, one is granted."""
    one, two = Locks(r), Locks(r)
    one_holds, two_holds, two_done = (threading.Event() for _ in range(3))

    def first() -> list[int]:
        with one.lock("a", ttl=30):
            one_holds.set()
            assert two_holds.wait(5)
            with one.lock_all(["b", "c"], ttl=30, blocking_timeout=10) as held:
                return held.fences

    def second() -> None:
        try:
            with two.lock("b", ttl=30):
                two_holds.set()
                assert one_holds.wait(5)
                wait_until(lambda: waiters(r, "lock:b") == 1, 5, "one queued for b")
                if second_asks_with == "lock":
                    with two.lock("a", ttl=30, wait=10):
                        pass
                else:
                    with two.lock_all(["a", "d"], ttl=30, blocking_timeout=10):
                        pass
        finally:
            two_done.set()

    one_thread, one_outcome = spawn(first)
    two_thread, two_outcome = spawn(second)
    two_thread.join(10)
    one_thread.join(10)
    error = two_outcome.get("error")
    assert isinstance(error, Deadlock), two_outcome
    assert isinstance(error, LockError) and isinstance(error, redis.ResponseError)
    assert error.key == "lock:a" and error.held == "lock:b"
    assert str(error).startswith("DEADLOCK waiting for lock:a would wait for lock:b")
    assert "result" in one_outcome, one_outcome
    assert len(one_outcome["result"]) == 2
    assert r.exists("lock:a", "lock:b", "lock:c", "lock:d") == 0
