"""What a lease does the threads' way, written by hand rather than generated from
tests/_async/test_leases.py because what is checked is the threads' own: one refresher
thread for all leases of a manager (counted among the threads by name), and the
run-once decorator with callers in threads meeting on ``threading.Event``s. The
asyncio side's own is tests/test_asyncio_leases.py. Neither side's: the errors'
messages on every redis-py and the fence checks of ``fencelock.sql`` (no server, no
client). What both sides do alike (deadlines, every way of losing a lease and how
``LockLost`` tells it, ``max_hold``, ``min_hold``, upgrades refused within one thread
or task, a full bounded pool) is tests/_async/test_leases.py (the sync side generated
from it)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import pytest
import redis
import redis.asyncio
from servers import wait_until

import fencelock
import fencelock.asyncio
from fencelock import Locks


def refresher_threads(locks: Locks) -> list[threading.Thread]:
    name = locks._refresher.name
    return [t for t in threading.enumerate() if t.name == name]


def test_one_refresher_thread_for_every_lease_of_a_manager(r: redis.Redis) -> None:
    locks = Locks(r)
    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(locks.lock(f"many:{i}", ttl=0.3)) for i in range(50)
        ]
        assert len(refresher_threads(locks)) == 1
        time.sleep(0.7)  # more than twice the ttl: every lease refreshed
        fences = r.execute_command  # shorter lines below
        for lease in leases:
            assert fences("LOCK.FENCE", lease.key, lease.token) == lease.fence
            assert not lease.lost.is_set()
    wait_until(
        lambda: not refresher_threads(locks), 5, "the refresher to end when idle"
    )


def test_two_managers_on_one_client_have_threads_told_apart(r: redis.Redis) -> None:
    """Each manager has its own refresher thread, named after the client and then
    the manager's refresher: two on one client used to share one name, so a dump
    could not tell whose thread was whose."""
    first, second = Locks(r), Locks(r)
    prefix = f"fencelock-refresher-{id(r):x}"
    with first.lock("first", ttl=10), second.lock("second", ttl=10):
        names = [t.name for t in threading.enumerate() if t.name.startswith(prefix)]
    assert len(names) == 2
    assert len(set(names)) == 2, names
    first.close()
    second.close()
    assert not refresher_threads(first) and not refresher_threads(second)


def test_close_from_on_lost_on_the_refresher_thread(r: redis.Redis) -> None:
    """``on_lost`` runs on the refresher thread; a callback that closes the manager
    there cannot wait for that thread to end (it would wait for itself): ``close()``
    returns, and the thread ends after the callback."""
    locks = Locks(r, session=False)
    outcome: list[object] = []

    def close_on_loss(lease: fencelock.Lease) -> None:
        try:
            locks.close()
            outcome.append(threading.current_thread().name)
        except BaseException as error:
            outcome.append(error)

    with locks.lock("lost", ttl=0.3, on_lost=close_on_loss, lost_ok=True) as lease:
        r.delete(lease.key)
        assert lease.lost.wait(5)
        wait_until(lambda: bool(outcome), 5, "on_lost to run")
    assert outcome == [locks._refresher.name]
    locks.close()
    assert not refresher_threads(locks)


def test_the_refresher_thread_lingers_from_its_last_lease_not_its_first(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acquire-release cycles that go on for longer than the linger keep one
    refresher thread, and its connection, for as long as they go on: the linger counts
    from when the last lease left. The thread used to count from when it first saw no
    lease, and ended at that deadline whenever no lease was held at that instant (the
    next release then dialed a new connection). Each lease here is held for a round
    trip and left for 50 ms, so the old thread found none held at one of its deadlines
    almost always; the new one ends only after the linger without any lease."""
    from fencelock._sync import _refresher

    monkeypatch.setattr(_refresher, "LINGER", 0.5)
    locks = Locks(r)
    with locks.lock("linger", ttl=10):
        pass
    first = locks._refresher._thread
    assert first is not None
    connections = dict(locks._refresher._connections)
    assert len(connections) == 1, "the release went over the refresher's own"
    ended = time.monotonic() + 2.0
    while time.monotonic() < ended:
        with locks.lock("linger", ttl=10):
            pass
        time.sleep(0.05)
    assert locks._refresher._thread is first, "one thread through the cycles"
    assert first.is_alive()
    assert locks._refresher._connections == connections, "and one connection"
    wait_until(lambda: not first.is_alive(), 5, "the refresher to end after the linger")
    assert not locks._refresher._connections, "its connection closed as it ended"
    locks.close()


def test_once_runs_the_job_on_one_caller_and_skips_the_others(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    locks = Locks(r)
    ran: list[int] = []
    inside = threading.Event()
    proceed = threading.Event()

    @locks.once("daily-report", ttl=10, min_hold=1)
    def report(day: int) -> str:
        ran.append(day)
        inside.set()
        proceed.wait(5)
        return f"report {day}"

    results: list[object] = []
    first = threading.Thread(target=lambda: results.append(report(1)))
    first.start()
    assert inside.wait(5)
    with caplog.at_level(logging.INFO, logger="fencelock"):
        assert report(2) is None
    assert "daily-report" in caplog.text
    proceed.set()
    first.join()
    assert results == ["report 1"] and ran == [1]
    # min_hold: a late server a moment later still skips.
    assert report(3) is None and ran == [1]
    assert report.__name__ == "report"


def test_sql_claim_orders_fences_and_lets_a_lease_claim_again() -> None:
    import sqlite3

    db = sqlite3.connect(":memory:")
    fencelock.sql.create_table(db)
    with db:
        fencelock.sql.claim(db, "stock:apple", 7)
    with db:
        fencelock.sql.claim(db, "stock:apple", 7)  # the same lease, a second write
    with db:
        fencelock.sql.claim(db, "stock:apple", 9)
    with pytest.raises(fencelock.StaleFence) as raised, db:
        fencelock.sql.claim(db, "stock:apple", 8)
    assert raised.value.highest == 9
    rows = db.execute("SELECT resource, fence FROM fences").fetchall()
    assert rows == [("stock:apple", 9)]
    fencelock.sql.claim(db, "other", 1, paramstyle="named")
    with pytest.raises(ValueError):
        fencelock.sql.claim(db, "other", 2, table="fences; DROP TABLE x")


def test_every_error_reads_as_its_message_on_every_redis_py() -> None:
    errors = [
        fencelock.ModuleNotLoaded("LOCK.ACQUIRE", "127.0.0.1:6379"),
        fencelock.ServerUnavailable("k", "127.0.0.1:6379", redis.TimeoutError("t")),
        fencelock.StaleFence("m", 5, 7),
        fencelock.NotReplicated("k", 2, 1),
        fencelock.WrongMode("k", "WRONGMODE k is held shared", "shared", None),
        fencelock.LockNotAcquired("k"),
        fencelock.LockLost("k"),
    ]
    for error in errors:
        assert str(error) == error.args[0] and " " in str(error), repr(error)
    assert "loadmodule" in str(errors[0])
