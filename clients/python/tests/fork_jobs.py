"""Jobs for the fork tests (tests/test_forks.py), importable by the processes that
``multiprocessing`` starts: a module-level lock manager per server, as an
application keeps one, used by the parent before its pool forks."""

from __future__ import annotations

import time

import redis

import fencelock

TTL = 0.5
# Longer than the ttl: only refreshes keep the lock through it.
WORK = 0.6

_managers: dict[str, tuple[redis.Redis, fencelock.Locks]] = {}


def manager(url: str) -> tuple[redis.Redis, fencelock.Locks]:
    """The process's client and manager for ``url``, made on first use (a forked
    child finds its parent's)."""
    if url not in _managers:
        client = redis.Redis.from_url(url)
        _managers[url] = (client, fencelock.Locks(client))
    return _managers[url]


def job(url: str, number: int) -> tuple[int, int, int]:
    """Holds the one lock ``pool`` through work longer than its ttl; the number of
    jobs inside it at once (1 unless two overlapped), and its fence."""
    client, locks = manager(url)
    with locks.lock("pool", ttl=TTL, wait=None) as lease:
        inside = int(client.incr("inside"))
        time.sleep(WORK)
        client.decr("inside")
        lease.ensure_held()
        return number, inside, lease.fence
