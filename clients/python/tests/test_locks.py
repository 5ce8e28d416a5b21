"""``fencelock.Locks`` (threads) against a real server: the same behaviour as the
asyncio manager, with a refresher thread and a ``threading.Event`` for loss."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from servers import wait_until

from fencelock import Lease, LockLost, LockNotAcquired, Locks
from fencelock._sync._refresher import thread_name


def holds(client: redis.Redis, lease: Lease) -> bool:
    fence = client.execute_command("LOCK.FENCE", lease.key, lease.token)
    return bool(fence == lease.fence)


def test_acquire_busy_and_release(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("report", ttl=60) as lease:
        assert lease.key == "lock:report" and holds(r, lease)
        with pytest.raises(LockNotAcquired), locks.lock("report", ttl=60):
            pytest.fail("entered a held lock")
    assert lease.released
    assert r.exists("lock:report") == 0


def test_wait_is_served_by_the_server_queue(r: redis.Redis) -> None:
    locks = Locks(r)
    holder = locks.acquire("queue", ttl=30)
    threading.Timer(0.2, locks.release, args=(holder,)).start()
    start = time.monotonic()
    with locks.lock("queue", ttl=30, wait=5) as lease:
        assert 0.15 < time.monotonic() - start < 2
        assert lease.fence > holder.fence


def test_auto_refresh_keeps_the_lock_over_three_ttls(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("long-job", ttl=0.3) as lease:
        for _ in range(6):
            time.sleep(0.2)
            assert holds(r, lease)
    assert lease.released and not lease.lost.is_set()


def test_a_deleted_key_is_reported_lost_within_one_interval(r: redis.Redis) -> None:
    locks = Locks(r)
    reported: list[Lease] = []
    with locks.lock("fragile", ttl=0.6, on_lost=reported.append, lost_ok=True) as lease:
        r.delete("lock:fragile")
        deleted_at = time.monotonic()
        assert lease.lost.wait(2)
        assert time.monotonic() - deleted_at <= 0.3
        # on_lost runs on the refresher thread right after the event is set.
        wait_until(lambda: bool(reported), 2, "on_lost")
        assert reported == [lease]
        with pytest.raises(LockLost):
            lease.ensure_held()
    assert not lease.released


def test_an_exception_in_the_block_releases(r: redis.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(RuntimeError), locks.lock("crashy", ttl=60):
        raise RuntimeError("job failed")
    assert r.exists("lock:crashy") == 0
    name = thread_name(r)
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name == name],
        5,
        "the refresher thread to end a while after its last lease",
    )


def test_min_hold(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("cron", ttl=10, min_hold=0.5) as lease:
        pass
    assert not lease.released
    assert 400 < r.pttl("lock:cron") <= 500
    with pytest.raises(LockNotAcquired):
        locks.acquire("cron", ttl=10)


def test_info(r: redis.Redis) -> None:
    locks = Locks(r)
    assert locks.info("report") is None
    with locks.lock("report", ttl=30) as lease:
        info = locks.info("report")
        assert info is not None
        assert (info["held"], info["fence"], info["waiters"]) == (True, lease.fence, 0)
