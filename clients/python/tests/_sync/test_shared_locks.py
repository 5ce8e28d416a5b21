# Generated from tests/_async/test_shared_locks.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""The lock manager with ``shared=True`` and ``limit=n``, on both sides: leases of
readers and of semaphore permits, each with its own refresher, loss report and
``min_hold``; waiting for a leaving holder; ``WrongMode``; a limit checked before
anything is sent; waits past the socket timeout, a permit confirmed on a replica,
semaphores and read-write locks on Redis Cluster. Tasks waiting across modes and a
cancelled shared wait are tests/test_shared_locks.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
import redis.cluster
from servers import Server, start_replica

import fencelock
from fencelock import (
    Lock,
    LockLost,
    LockNotAcquired,
    Locks,
    ReadWriteLock,
    Semaphore,
    WrongMode,
    lock_info,
)

from .helpers import later, set_within, sleep, until


def holds(client: redis.Redis, lease: fencelock.Lease) -> bool:
    fence = client.execute_command("LOCK.FENCE", lease.key, lease.token)
    return bool(fence == lease.fence)


def test_permits_through_the_manager(r: redis.Redis) -> None:
    locks = Locks(r)
    with (
        locks.lock("api", ttl=30, limit=2) as first,
        locks.lock("api", ttl=30, limit=2) as second,
    ):
        assert (first.mode, first.limit, first.shared) == ("semaphore", 2, True)
        assert first.fence < second.fence
        assert holds(r, first) and holds(r, second)
        with pytest.raises(LockNotAcquired):
            with locks.lock("api", ttl=30, limit=2):
                pytest.fail("a third permit of two")
        info = locks.info("api")
        assert info is not None
        assert (info["mode"], info["holders"], info["limit"]) == ("semaphore", 2, 2)
        with pytest.raises(WrongMode) as raised:
            locks.acquire("api", ttl=30, limit=3)
        assert (raised.value.mode, raised.value.limit) == ("semaphore", 2)
        with pytest.raises(WrongMode):
            locks.acquire("api", ttl=30, shared=True)
    assert first.released and second.released
    assert r.exists("lock:api") == 0


def test_a_permit_waits_for_a_leaving_holder(r: redis.Redis) -> None:
    locks = Locks(r)
    holder = locks.acquire("api", ttl=30, limit=1)
    later(0.2, locks.release, holder)
    start = time.monotonic()
    with locks.lock("api", ttl=30, limit=1, wait=5) as lease:
        assert 0.15 < time.monotonic() - start < 2
        assert lease.fence > holder.fence


def test_readers_and_a_writer_through_the_manager(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    with (
        locks.lock("cfg", ttl=30, shared=True) as a,
        locks.lock("cfg", ttl=30, shared=True) as b,
    ):
        assert (a.mode, a.limit) == ("shared", None)
        assert holds(r, a) and holds(r, b)
        with pytest.raises(LockNotAcquired):
            locks.acquire("cfg", ttl=30)
        start = time.monotonic()
        with pytest.raises(LockNotAcquired):
            # Another manager waits; this one would be refused (it would wait for
            # its own block's readers).
            Locks(r).acquire("cfg", ttl=30, wait=0.2)
        assert time.monotonic() - start >= 0.2
    with locks.lock("cfg", ttl=30) as writer:
        assert writer.mode == "exclusive"
        with pytest.raises(LockNotAcquired):
            locks.acquire("cfg", ttl=30, shared=True)


def test_every_holder_refreshes_and_is_lost_on_its_own(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    reported: list[fencelock.Lease] = []

    def was_reported() -> bool:
        return reported == [taken]

    with locks.lock("api", ttl=0.3, limit=3, on_lost=reported.append) as kept:
        with locks.lock(
            "api", ttl=0.3, limit=3, on_lost=reported.append, lost_ok=True
        ) as taken:
            for _ in range(4):  # twice the ttl
                sleep(0.15)
                assert holds(r, kept) and holds(r, taken)
            # Someone releases one holder's permit behind its back.
            r.execute_command("LOCK.RELEASE", taken.key, taken.token)
            assert set_within(taken.lost, 2)
            with pytest.raises(LockLost):
                taken.ensure_held()
            with pytest.raises(LockLost):
                taken.guard("SET", "x", 1)
            sleep(0.3)
            assert holds(r, kept) and not kept.lost.is_set()
            assert kept.guard("SET", "x", 2) == b"OK"
        until(was_reported, 2, "on_lost")
    assert kept.released and not taken.released
    assert r.get("x") == b"2"


def test_min_hold_cuts_one_holders_lease(r: redis.Redis) -> None:
    locks = Locks(r)
    other = locks.acquire("cron", ttl=30, shared=True)
    with locks.lock("cron", ttl=10, shared=True, min_hold=0.5) as lease:
        pass
    assert not lease.released and holds(r, lease)
    sleep(0.7)
    assert not holds(r, lease) and holds(r, other)
    info = locks.info("cron")
    assert info is not None and info["holders"] == 1
    locks.release(other)


def test_a_limit_is_checked_before_anything_is_sent(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    with pytest.raises(ValueError):
        with locks.lock("api", ttl=10, limit=0):
            pytest.fail("a semaphore of no permits")
    assert r.exists("lock:api") == 0


def test_shared_waits_longer_than_the_socket_timeout(
    server: Server, r: redis.Redis
) -> None:
    """On the pinned connection too, the acquire carries its mode: shared, or a
    permit of a semaphore."""
    client = redis.Redis(port=server.port, socket_timeout=0.3)
    locks = Locks(client)
    writer = locks.acquire("cfg", ttl=10)
    later(0.6, locks.release, writer)
    start = time.monotonic()
    reader = locks.acquire("cfg", ttl=10, shared=True, wait=3)
    assert 0.5 < time.monotonic() - start < 2.5
    info = locks.info("cfg")
    assert info is not None and info["mode"] == "shared"
    locks.release(reader)
    holder = locks.acquire("api", ttl=10, limit=1)
    later(0.6, locks.release, holder)
    permit = locks.acquire("api", ttl=10, limit=1, wait=3)
    assert permit.mode == "semaphore" and permit.fence > holder.fence
    locks.release(permit)
    locks.close()
    client.close()


def test_wait_replicas_confirms_a_permit_on_the_replica(tmp_path: Path) -> None:
    primary = Server(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", primary)
    try:
        client = redis.Redis(port=primary.port)
        on_replica = redis.Redis(port=replica.port)
        locks = Locks(client)
        with locks.lock("api", ttl=30, limit=2, wait_replicas=1) as first:
            second = locks.acquire("api", ttl=30, limit=2, wait_replicas=1)
            info = lock_info(on_replica, "lock:api")
            assert info is not None, "acknowledged: the replica has both grants now"
            assert (info["mode"], info["holders"], info["limit"]) == ("semaphore", 2, 2)
            fence = on_replica.execute_command("LOCK.FENCE", "lock:api", first.token)
            assert fence == first.fence
            locks.release(second)
        reader = Lock(client, "rw", timeout=30, shared=True, wait_replicas=1)
        assert reader.acquire()
        info = lock_info(on_replica, "rw")
        assert info is not None and info["mode"] == "shared"
        reader.release()
        locks.close()
        client.close()
        on_replica.close()
    finally:
        replica.stop()
        primary.stop()


def test_cluster(cluster: list[Server]) -> None:
    client = redis.cluster.RedisCluster(
        host="127.0.0.1", port=cluster[0].port, socket_timeout=0.3
    )
    for key in ("sem:a", "sem:b", "sem:c"):
        permits = [Semaphore(client, key, 2, timeout=10) for _ in range(3)]
        assert [p.acquire(blocking=False) for p in permits] == [
            True,
            True,
            False,
        ]
        assert permits[2].locked()
        for p in permits[:2]:
            p.release()
        rw = ReadWriteLock(client, key, timeout=10)
        with rw.read():
            other = ReadWriteLock(client, key, timeout=10)
            assert not other.write().acquire(blocking=False)
    locks = Locks(client)
    holder = locks.acquire("{api}", ttl=10, limit=1)
    later(0.6, locks.release, holder)
    permit = locks.acquire("{api}", ttl=10, limit=1, wait=3)
    assert permit.mode == "semaphore"
    with Semaphore(client, "sem:a", 3, timeout=10) as sem:
        assert sem.owned()
    locks.release(permit)
    locks.close()
    client.close()
