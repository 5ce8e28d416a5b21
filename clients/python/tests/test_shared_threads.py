"""Threads sharing one ``fencelock.Semaphore`` or ``ReadWriteLock`` object, each
holding its own permit or read lock: a case of threads only (an asyncio object's
tokens are per task), so written here by hand rather than generated from
``tests/_async/test_shared.py``; ``tests/test_asyncio_shared.py`` has it for tasks."""

from __future__ import annotations

import threading
from typing import Any

import redis

from fencelock import ReadWriteLock, Semaphore, lock_info


def holders(client: redis.Redis, key: str) -> int:
    found = lock_info(client, key)
    return 0 if found is None else found["holders"]


def test_threads_share_a_semaphore_object(r: redis.Redis) -> None:
    permits = Semaphore(r, "sem", 3, timeout=10)
    inside = threading.Barrier(3, timeout=5)
    fences: list[Any] = []

    def work() -> None:
        with permits:
            inside.wait()  # all three hold at once
            fences.append(permits.fence)
            inside.wait()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(set(fences)) == 3
    assert r.exists("sem") == 0


def test_readers_in_threads_share_the_read_lock(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "cfg", timeout=10)
    all_in = threading.Barrier(4, timeout=5)
    leave = threading.Event()

    def read() -> None:
        with rw.read():
            all_in.wait()
            leave.wait(5)

    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    all_in.wait()
    assert holders(r, "cfg") == 3
    assert not rw.write().acquire(blocking=False)
    leave.set()
    for thread in threads:
        thread.join(10)
    assert rw.write().acquire(blocking=False)
    rw.write().release()
