"""Every loss is ``LockLost``: leaving a block whose lease was lost raises it, also
when the release that follows cannot reach the server (that failure is its
``__cause__``), for the manager's blocks and ``lock_all``; ``lost_ok=True`` leaves
quietly. A release answered 0 on leaving is a loss too, and so is the drop-in's
release of a lock it lost. (Pickling the errors is tests/test_losses.py.)"""

from __future__ import annotations

import pytest
import redis.asyncio
import redis.asyncio.retry
from redis.backoff import NoBackoff
from servers import Server

import fencelock.asyncio

from .helpers import drop_in, set_within

TTL = 0.3


def no_retries(server: Server) -> redis.asyncio.Redis:
    """A client that gives up on a dead server at once (no retries to wait for)."""
    return redis.asyncio.Redis(
        port=server.port, retry=redis.asyncio.retry.Retry(NoBackoff(), 0)
    )


async def stop_and_wait_for_the_loss(
    server: Server, lease: fencelock.asyncio.Lease
) -> None:
    server.stop()
    assert await set_within(lease.lost, 10), "the lease reported lost"


async def test_leaving_after_the_server_died_raises_lock_lost(
    own_server: Server,
) -> None:
    client = no_retries(own_server)
    locks = fencelock.asyncio.Locks(client)
    with pytest.raises(fencelock.asyncio.LockLost) as raised:
        async with locks.lock("job", ttl=TTL) as lease:
            await stop_and_wait_for_the_loss(own_server, lease)
    assert raised.value.reason == fencelock.asyncio.LockLost.DEADLINE
    assert isinstance(raised.value.__cause__, fencelock.asyncio.ServerUnavailable)
    await client.aclose()


async def test_lost_ok_leaves_quietly_when_the_server_died(
    own_server: Server,
) -> None:
    client = no_retries(own_server)
    locks = fencelock.asyncio.Locks(client)
    async with locks.lock("job", ttl=TTL, lost_ok=True) as lease:
        await stop_and_wait_for_the_loss(own_server, lease)
    assert not lease.released
    await client.aclose()


async def test_leaving_lock_all_after_the_server_died_raises_lock_lost(
    own_server: Server,
) -> None:
    client = no_retries(own_server)
    locks = fencelock.asyncio.Locks(client)
    with pytest.raises(fencelock.asyncio.LockLost) as raised:
        async with locks.lock_all(["{o}a", "{o}b"], ttl=TTL) as held:
            await stop_and_wait_for_the_loss(own_server, held.leases[0])
    assert isinstance(raised.value.__cause__, fencelock.asyncio.ServerUnavailable)
    await client.aclose()


async def test_a_release_answered_0_on_leaving_is_a_loss(
    r: redis.asyncio.Redis,
) -> None:
    """Another client deletes the lock while the block holds it: leaving finds it
    gone."""
    locks = fencelock.asyncio.Locks(r, session=False)
    with pytest.raises(fencelock.asyncio.LockLost):
        async with locks.lock("job", ttl=5) as lease:
            await r.delete("lock:job")
    assert not lease.released


async def test_the_dropin_release_after_a_loss_is_lock_lost(
    r: redis.asyncio.Redis,
) -> None:
    lock = drop_in(r, "dropin", timeout=5)
    assert await lock.acquire()
    await r.delete("dropin")
    with pytest.raises(fencelock.asyncio.LockLost) as raised:
        await lock.release()
    assert isinstance(raised.value, redis.exceptions.LockNotOwnedError)
    assert "no longer owned" in str(raised.value)
