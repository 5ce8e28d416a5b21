"""Sessions (``Locks(client, session=True)``, the default) on both sides: one
``LOCK.KEEPALIVE`` per server and interval keeps every lock of a manager's blocks
alive (what the server ran is read from ``INFO commandstats``), leaving the manager's
``async with`` releases its session, and a wait longer than the ttl keeps both the
grant and the session. The rest of the sessions' tests (threads, processes, cluster
migrations, lock-delay, constructions) are tests/test_sessions.py."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
import redis.asyncio

from fencelock.asyncio import Lease, Locks

from .helpers import sleep

NAMES = ("lock.keepalive", "lock.refresh", "lock.held", "lock.close")


async def calls(client: redis.asyncio.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``)."""
    stats = (await client.info("commandstats")).get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


async def counted(client: redis.asyncio.Redis) -> dict[str, int]:
    """The session commands and refreshes the server ran so far."""
    return {name: await calls(client, name) for name in NAMES}


async def since(client: redis.asyncio.Redis, before: dict[str, int]) -> dict[str, int]:
    """The session commands and refreshes the server ran since ``before``."""
    now = await counted(client)
    return {name: now[name] - before[name] for name in NAMES}


async def held_by(client: redis.asyncio.Redis, session: str) -> list[Any]:
    return list(await client.execute_command("LOCK.HELD", session))


async def holds(client: redis.asyncio.Redis, lease: Lease) -> bool:
    return bool(await client.execute_command("LOCK.FENCE", lease.key, lease.token))


MANY = 200
TTL = 0.6  # the heartbeat every 0.2 s: a busy machine may stall a process 0.3 s


async def test_one_keepalive_per_interval_keeps_200_locks(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    async with contextlib.AsyncExitStack() as stack:
        leases = [
            await stack.enter_async_context(locks.lock(f"many:{i}", ttl=TTL))
            for i in range(MANY)
        ]
        session = leases[0].session
        assert session is not None and {lease.session for lease in leases} == {session}
        before = await counted(r)
        start = time.monotonic()
        await sleep(5 * TTL)
        elapsed = time.monotonic() - start
        counts = await since(r, before)
        assert counts["lock.refresh"] == 0, "no lease refreshed on its own"
        assert counts["lock.held"] == 0
        sent = counts["lock.keepalive"]
        assert 5 <= sent <= elapsed / (TTL / 3) + 2, "one keepalive per interval"
        assert len(await held_by(r, session)) == MANY
        assert not [lease for lease in leases if lease.lost.is_set()]
        # Each confirmed keepalive moved every deadline.
        assert min(lease.time_left for lease in leases) > TTL / 3
    assert await r.exists(*(f"lock:many:{i}" for i in range(MANY))) == 0
    assert await held_by(r, session) == []


async def test_leaving_the_managers_with_closes_it(r: redis.asyncio.Redis) -> None:
    async with Locks(r) as locks:
        lease = await locks.acquire("ctx", ttl=30, session=True)
        async with locks.lock("ctx-block", ttl=30):
            pass
        assert await holds(r, lease)
    assert await r.exists("lock:ctx") == 0 and lease.released
    # The block's own exception is not hidden by the close.
    with pytest.raises(RuntimeError):
        async with Locks(r) as locks:
            await locks.acquire("ctx", ttl=30, session=True)
            raise RuntimeError("job failed")
    assert await r.exists("lock:ctx") == 0


async def _held_elsewhere(
    client: redis.asyncio.Redis, key: str, seconds: float
) -> None:
    """Another holder takes ``key`` for ``seconds`` (then its lease runs out)."""
    await client.execute_command(
        "LOCK.ACQUIRE", key, int(seconds * 1000), "TOKEN", "other"
    )


async def test_a_wait_longer_than_the_ttl_keeps_the_grant_and_the_session(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    await _held_elsewhere(r, "lock:long-wait:b", 1.5)
    async with (
        locks.lock("long-wait:a", ttl=1.0) as a,
        locks.lock("long-wait:b", ttl=1.0, wait=None) as b,
    ):
        # Granted about 1.5 s after it was asked for, with a ttl of 1 s.
        assert not b.lost.is_set(), b.lost_reason
        assert b.time_left > 0.5
        await sleep(1.5)
        assert not b.lost.is_set() and not a.lost.is_set()
        assert await holds(r, b) and await holds(r, a)
    await locks.aclose()
