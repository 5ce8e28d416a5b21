"""Every loss is ``LockLost``: leaving a block whose lease was lost raises it, also
when the release that follows cannot reach the server (that failure is its
``__cause__``), for the manager's blocks, ``lock_all`` and asyncio; ``lost_ok=True``
leaves quietly. A release answered 0 on leaving is a loss too."""

from __future__ import annotations

import asyncio
import pickle

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import Server, wait_until

import fencelock
import fencelock.asyncio

TTL = 0.3


def no_retries(server: Server) -> redis.Redis:
    """A client that gives up on a dead server at once (no retries to wait for)."""
    return server.client(retry=Retry(NoBackoff(), 0))


def stop_and_wait_for_the_loss(server: Server, lease: fencelock.Lease) -> None:
    server.stop()
    wait_until(lease.lost.is_set, message="the lease reported lost")


def test_leaving_after_the_server_died_raises_lock_lost(own_server: Server) -> None:
    locks = fencelock.Locks(no_retries(own_server))
    with (
        pytest.raises(fencelock.LockLost) as raised,
        locks.lock("job", ttl=TTL) as lease,
    ):
        stop_and_wait_for_the_loss(own_server, lease)
    assert raised.value.reason == fencelock.LockLost.DEADLINE
    assert isinstance(raised.value.__cause__, fencelock.ServerUnavailable)


def test_lost_ok_leaves_quietly_when_the_server_died(own_server: Server) -> None:
    locks = fencelock.Locks(no_retries(own_server))
    with locks.lock("job", ttl=TTL, lost_ok=True) as lease:
        stop_and_wait_for_the_loss(own_server, lease)
    assert not lease.released


def test_leaving_lock_all_after_the_server_died_raises_lock_lost(
    own_server: Server,
) -> None:
    locks = fencelock.Locks(no_retries(own_server))
    with (
        pytest.raises(fencelock.LockLost) as raised,
        locks.lock_all(["{o}a", "{o}b"], ttl=TTL) as held,
    ):
        stop_and_wait_for_the_loss(own_server, held.leases[0])
    assert isinstance(raised.value.__cause__, fencelock.ServerUnavailable)


def test_asyncio_leaving_after_the_server_died_raises_lock_lost(
    own_server: Server,
) -> None:
    async def main() -> None:
        locks = fencelock.asyncio.Locks(redis.asyncio.Redis.from_url(own_server.url))
        with pytest.raises(fencelock.LockLost) as raised:
            async with locks.lock("job", ttl=TTL) as lease:
                own_server.stop()
                await asyncio.wait_for(lease.lost.wait(), 10)
        assert isinstance(raised.value.__cause__, fencelock.ServerUnavailable)

    asyncio.run(main())


def test_a_release_answered_0_on_leaving_is_a_loss(r: redis.Redis) -> None:
    """Another client deletes the lock while the block holds it: leaving finds it
    gone."""
    locks = fencelock.Locks(r, session=False)
    with pytest.raises(fencelock.LockLost), locks.lock("job", ttl=5) as lease:
        r.delete("lock:job")
    assert not lease.released


def test_the_dropin_release_after_a_loss_is_lock_lost(r: redis.Redis) -> None:
    lock = r.lock("dropin", timeout=5, lock_class=fencelock.Lock)
    assert lock.acquire()
    r.delete("dropin")
    with pytest.raises(fencelock.LockLost) as raised:
        lock.release()
    assert isinstance(raised.value, redis.exceptions.LockNotOwnedError)
    assert "no longer owned" in str(raised.value)


def test_lock_lost_and_lock_not_acquired_survive_pickling() -> None:
    """As a multiprocessing pool or Celery sends a job's exception back."""
    lost = pickle.loads(pickle.dumps(fencelock.LockLost("lock:a", "deadline")))
    assert (lost.key, lost.reason) == ("lock:a", "deadline")
    assert str(lost) == str(fencelock.LockLost("lock:a", "deadline"))
    busy = pickle.loads(pickle.dumps(fencelock.LockNotAcquired("lock:b")))
    assert busy.key == "lock:b" and "held by someone else" in str(busy)
