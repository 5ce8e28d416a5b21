# Generated from tests/_async/test_sessions.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Sessions (``Locks(client, session=True)``, the default) on both sides: one
``LOCK.KEEPALIVE`` per server and interval keeps every lock of a manager's blocks
alive (what the server ran is read from ``INFO commandstats``), leaving the manager's
``with`` releases its session, and a wait longer than the ttl keeps both the
grant and the session. The rest of the sessions' tests (threads, processes, cluster
migrations, lock-delay, constructions) are tests/test_sessions.py."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
import redis

from fencelock import Lease, Locks

from .helpers import sleep

NAMES = ("lock.keepalive", "lock.refresh", "lock.held", "lock.close")


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``)."""
    stats = (client.info("commandstats")).get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def counted(client: redis.Redis) -> dict[str, int]:
    """The session commands and refreshes the server ran so far."""
    return {name: calls(client, name) for name in NAMES}


def since(client: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    """The session commands and refreshes the server ran since ``before``."""
    now = counted(client)
    return {name: now[name] - before[name] for name in NAMES}


def held_by(client: redis.Redis, session: str) -> list[Any]:
    return list(client.execute_command("LOCK.HELD", session))


def holds(client: redis.Redis, lease: Lease) -> bool:
    return bool(client.execute_command("LOCK.FENCE", lease.key, lease.token))


MANY = 200
TTL = 0.6  # the heartbeat every 0.2 s: a busy machine may stall a process 0.3 s


def test_one_keepalive_per_interval_keeps_200_locks(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(locks.lock(f"many:{i}", ttl=TTL)) for i in range(MANY)
        ]
        session = leases[0].session
        assert session is not None and {lease.session for lease in leases} == {session}
        before = counted(r)
        start = time.monotonic()
        sleep(5 * TTL)
        elapsed = time.monotonic() - start
        counts = since(r, before)
        assert counts["lock.refresh"] == 0, "no lease refreshed on its own"
        assert counts["lock.held"] == 0
        sent = counts["lock.keepalive"]
        assert 5 <= sent <= elapsed / (TTL / 3) + 2, "one keepalive per interval"
        assert len(held_by(r, session)) == MANY
        assert not [lease for lease in leases if lease.lost.is_set()]
        # Each confirmed keepalive moved every deadline.
        assert min(lease.time_left for lease in leases) > TTL / 3
    assert r.exists(*(f"lock:many:{i}" for i in range(MANY))) == 0
    assert held_by(r, session) == []


def test_leaving_the_managers_with_closes_it(r: redis.Redis) -> None:
    with Locks(r) as locks:
        lease = locks.acquire("ctx", ttl=30, session=True)
        with locks.lock("ctx-block", ttl=30):
            pass
        assert holds(r, lease)
    assert r.exists("lock:ctx") == 0 and lease.released
    # The block's own exception is not hidden by the close.
    with pytest.raises(RuntimeError):
        with Locks(r) as locks:
            locks.acquire("ctx", ttl=30, session=True)
            raise RuntimeError("job failed")
    assert r.exists("lock:ctx") == 0


def _held_elsewhere(client: redis.Redis, key: str, seconds: float) -> None:
    """Another holder takes ``key`` for ``seconds`` (then its lease runs out)."""
    client.execute_command("LOCK.ACQUIRE", key, int(seconds * 1000), "TOKEN", "other")


def test_a_wait_longer_than_the_ttl_keeps_the_grant_and_the_session(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    _held_elsewhere(r, "lock:long-wait:b", 1.5)
    with (
        locks.lock("long-wait:a", ttl=1.0) as a,
        locks.lock("long-wait:b", ttl=1.0, wait=None) as b,
    ):
        # Granted about 1.5 s after it was asked for, with a ttl of 1 s.
        assert not b.lost.is_set(), b.lost_reason
        assert b.time_left > 0.5
        sleep(1.5)
        assert not b.lost.is_set() and not a.lost.is_set()
        assert holds(r, b) and holds(r, a)
    locks.close()
