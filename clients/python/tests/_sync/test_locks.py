# Generated from tests/_async/test_locks.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""``fencelock.Locks`` against a real server: acquire and busy, waiting in the
server's queue, auto-refresh past the ttl, loss reported within one refresh interval,
release on exceptions, ``min_hold``, ``LOCK.INFO``, a chosen token and prefix. What
only tasks do (cancellation, a timeout around the block) is
tests/test_asyncio_locks.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from fencelock import Lease, LockLost, LockNotAcquired, Locks

from .helpers import (
    join,
    later,
    refresher_running,
    set_within,
    sleep,
    spawn,
    until,
)


def holds(client: redis.Redis, lease: Lease) -> bool:
    fence = client.execute_command("LOCK.FENCE", lease.key, lease.token)
    return bool(fence == lease.fence)


def test_a_lease_holds_the_key_and_releases_it(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("daily-notif", ttl=60) as lease:
        assert lease.key == "lock:daily-notif"
        assert isinstance(lease.token, str) and len(lease.token) == 32
        assert lease.fence > 0
        assert holds(r, lease)
        assert 59_000 < r.pttl("lock:daily-notif") <= 60_000
    assert lease.released
    assert r.exists("lock:daily-notif") == 0


def test_acquire_busy_and_release(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("report", ttl=60) as lease:
        assert lease.key == "lock:report" and holds(r, lease)
        with pytest.raises(LockNotAcquired):
            with locks.lock("report", ttl=60):
                pytest.fail("entered a held lock")
    assert lease.released
    assert r.exists("lock:report") == 0


def test_busy_fails_at_once_with_wait_zero(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("report", ttl=60) as lease:
        start = time.monotonic()
        with pytest.raises(LockNotAcquired):
            with locks.lock("report", ttl=60, wait=0):
                pytest.fail("entered a held lock")
        assert time.monotonic() - start < 0.2
        assert holds(r, lease)


def test_wait_is_served_by_the_server_queue(r: redis.Redis) -> None:
    locks = Locks(r)
    holder = locks.acquire("queue", ttl=30)
    later(0.2, locks.release, holder)
    start = time.monotonic()
    with locks.lock("queue", ttl=30, wait=5) as lease:
        assert 0.15 < time.monotonic() - start < 2
        assert lease.fence > holder.fence


def test_wait_queues_in_the_server_and_times_out(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    order = []

    def holder() -> None:
        with locks.lock("queue", ttl=30) as lease:
            order.append(("holder", lease.fence))
            sleep(0.3)

    def waiter() -> None:
        sleep(0.05)
        with locks.lock("queue", ttl=30, wait=5) as lease:
            order.append(("waiter", lease.fence))

    started = [spawn(holder), spawn(waiter)]
    for task, outcome in started:
        join(task, 10)
        assert "error" not in outcome, outcome
    assert [who for who, _ in order] == ["holder", "waiter"]
    assert order[1][1] > order[0][1]

    with locks.lock("queue", ttl=30):
        start = time.monotonic()
        with pytest.raises(LockNotAcquired):
            # Another manager: through this one, the wait would be refused at
            # once (it would wait for its own block).
            type(locks)(r).acquire("queue", ttl=30, wait=0.2)
        assert 0.2 <= time.monotonic() - start < 0.6


def test_auto_refresh_keeps_the_lock_over_three_ttls(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    with locks.lock("long-job", ttl=0.3) as lease:
        for _ in range(6):  # 1.2 s: four times the ttl
            sleep(0.2)
            assert holds(r, lease)
        assert not lease.lost.is_set()
    assert lease.released and not lease.lost.is_set()


def test_without_auto_refresh_the_lease_runs_out(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    with pytest.raises(LockLost):
        with locks.lock("short", ttl=0.2, auto_refresh=False) as lease:
            sleep(0.3)
            assert not holds(r, lease)
            assert lease.lost.is_set(), "reported at the deadline, no refresher"
    assert not lease.released


@pytest.mark.parametrize("async_callback", [False, True])
def test_a_deleted_key_is_reported_lost_within_one_interval(
    r: redis.Redis, async_callback: bool
) -> None:
    locks = Locks(r)
    reported: list[Lease] = []

    def on_lost_async(lease: Lease) -> None:
        reported.append(lease)

    def was_reported() -> bool:
        return bool(reported)

    on_lost: Any = on_lost_async if async_callback else reported.append
    with locks.lock("fragile", ttl=0.6, on_lost=on_lost, lost_ok=True) as lease:
        r.delete("lock:fragile")
        deleted_at = time.monotonic()
        assert set_within(lease.lost, 2)
        assert time.monotonic() - deleted_at <= 0.2 + 0.1, "one interval: ttl/3"
        # on_lost runs right after the event is set (on the refresher's thread, on
        # the threads' side).
        until(was_reported, 2, "on_lost")
        assert reported == [lease]
        with pytest.raises(LockLost):
            lease.ensure_held()
        # Someone else takes it now; the old holder's leaving must not free it.
        other = locks.acquire("fragile", ttl=10)
    assert not lease.released
    assert holds(r, other)


def test_an_exception_in_the_block_releases(r: redis.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(RuntimeError, match="job failed"):
        with locks.lock("crashy", ttl=60):
            raise RuntimeError("job failed")
    assert r.exists("lock:crashy") == 0

    def ended() -> bool:
        return not refresher_running(locks)

    until(ended, 5, "the refresher to end a while after its last lease")


@pytest.mark.parametrize("session", [True, False])
def test_close_returns_once_the_refresher_has_ended(
    r: redis.Redis, session: bool
) -> None:
    """The refresher lingers 2 s after the last lease; ``close()`` ends it and returns
    only once it has ended, so that a fork right after it is a single-threaded
    process's (Python 3.12 warns at a fork with threads). It used to only ask the
    thread (task) to end, which ran on for a moment after ``close()`` returned, and
    without sessions it did not even ask. The manager goes on afterwards."""
    locks = Locks(r, session=session)
    with locks.lock("closing", ttl=10):
        pass
    assert refresher_running(locks), "it lingers after the last lease"
    locks.close()
    assert not refresher_running(locks)
    with locks.lock("closing", ttl=10) as lease:
        assert refresher_running(locks)
        assert holds(r, lease)
    locks.close()
    assert not refresher_running(locks)


def test_min_hold_keeps_the_lock_for_the_rest_of_it(
    r: redis.Redis,
) -> None:
    """A job that finishes in no time leaves the lock held until ``min_hold`` has
    passed since the grant: a second server firing late finds it busy."""
    locks = Locks(r)
    with locks.lock("cron-now", ttl=10, min_hold=0.5) as lease:
        pass
    assert not lease.released
    assert 400 < r.pttl("lock:cron-now") <= 500
    with pytest.raises(LockNotAcquired):
        locks.acquire("cron-now", ttl=10)

    with locks.lock("cron", ttl=10, min_hold=0.5) as lease:
        sleep(0.1)
    assert not lease.released
    assert 300 < r.pttl("lock:cron") <= 400
    with pytest.raises(LockNotAcquired):
        locks.acquire("cron", ttl=10)
    sleep(0.45)
    assert r.exists("lock:cron") == 0

    with locks.lock("cron", ttl=10, min_hold=0.1) as lease:
        sleep(0.15)
    assert lease.released, "min_hold already over: released"


def test_info(any_r: redis.Redis) -> None:
    locks = Locks(any_r)
    assert locks.info("report") is None
    with locks.lock("report", ttl=30) as lease:
        info = locks.info("report")
        assert info is not None
        assert (info["held"], info["fence"], info["waiters"]) == (True, lease.fence, 0)
        assert info["held"] is True
        assert info["ttl_ms"] is not None and 29_000 < info["ttl_ms"] <= 30_000
    assert locks.info("report") is None


def test_a_chosen_token_and_prefix(r: redis.Redis) -> None:
    plain = Locks(r, prefix="")
    with plain.lock("job:1", ttl=30, token="worker-1") as lease:
        assert lease.key == "job:1"
        assert r.execute_command("LOCK.FENCE", "job:1", "worker-1")
