"""What a lease does its own way on each side, written by hand rather than
generated from tests/_async/test_leases.py because the two sides differ in what is
checked, not only in ``await``: one refresher thread (counted among the threads by
name) or one task (counted among the loop's tasks) for all leases of a manager; the
run-once decorator (threads meeting on ``threading.Event``s, or tasks gathered);
``ensure_held`` called or awaited, ``cancel_on_lost`` and cancellation around a block
(asyncio only); the write lock's token per task. Neither side's: the errors' messages
on every redis-py and the fence checks of ``fencelock.sql`` (no server, no client).
What both sides do alike (deadlines, every way of losing a lease and how ``LockLost``
tells it, ``max_hold``, ``min_hold``, upgrades refused within one thread or task, a
full bounded pool) is tests/_async/test_leases.py (the sync side generated from
it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time

import pytest
import redis
import redis.asyncio
from conftest import async_client, run
from servers import wait_until

import fencelock
import fencelock.asyncio
from fencelock import LockLost, LockNotAcquired, Locks
from fencelock._sync._refresher import thread_name


def refresher_threads(client: redis.Redis) -> list[threading.Thread]:
    name = thread_name(client)
    return [t for t in threading.enumerate() if t.name == name]


def test_one_refresher_thread_for_every_lease_of_a_manager(r: redis.Redis) -> None:
    locks = Locks(r)
    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(locks.lock(f"many:{i}", ttl=0.3)) for i in range(50)
        ]
        assert len(refresher_threads(r)) == 1
        time.sleep(0.7)  # more than twice the ttl: every lease refreshed
        fences = r.execute_command  # shorter lines below
        for lease in leases:
            assert fences("LOCK.FENCE", lease.key, lease.token) == lease.fence
            assert not lease.lost.is_set()
    wait_until(lambda: not refresher_threads(r), 5, "the refresher to end when idle")


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


def test_asyncio_once(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        ran: list[str] = []

        @locks.once("nightly", ttl=10)
        async def job(name: str) -> str:
            ran.append(name)
            await asyncio.sleep(0.2)
            return name

        results = await asyncio.gather(job("a"), job("b"), job("c"))
        assert sorted(map(str, results)) == ["None", "None", ran[0]]
        assert len(ran) == 1
        await client.aclose()

    run(main())


def test_asyncio_cancel_on_lost_cancels_the_block_and_raises_lock_lost(
    url: str,
) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        reached_end = False
        with pytest.raises(LockLost):
            async with locks.lock("cancel-me", ttl=0.3, cancel_on_lost=True):
                await client.delete("lock:cancel-me")
                await asyncio.sleep(5)
                reached_end = True
        assert not reached_end
        task = asyncio.current_task()
        assert task is not None
        cancelling = getattr(task, "cancelling", lambda: 0)
        assert cancelling() == 0, "our own cancellation is withdrawn"
        # The task goes on normally afterwards.
        await asyncio.sleep(0.01)

        # With lost_ok the block is cut short quietly.
        async with locks.lock(
            "cancel-ok", ttl=0.3, cancel_on_lost=True, lost_ok=True
        ) as lease:
            await client.delete("lock:cancel-ok")
            await asyncio.sleep(5)
        assert lease.lost.is_set()
        await client.aclose()

    start = time.monotonic()
    run(main())
    assert time.monotonic() - start < 3


def test_asyncio_ensure_held_works_called_or_awaited(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        async with locks.lock("checked", ttl=10, lost_ok=True) as lease:
            lease.ensure_held()
            await lease.ensure_held()
            await lease.ensure_held(check=True)
            await client.delete("lock:checked")
            lease.ensure_held()  # the clock still says held
            with pytest.raises(LockLost):
                await lease.ensure_held(check=True)
            with pytest.raises(LockLost):
                lease.ensure_held()
        await client.aclose()

    run(main())


def test_asyncio_one_refresher_task_for_many_leases(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        async with contextlib.AsyncExitStack() as stack:
            leases = [
                await stack.enter_async_context(locks.lock(f"m:{i}", ttl=0.3))
                for i in range(50)
            ]
            before = len(asyncio.all_tasks())
            await asyncio.sleep(0.7)
            for lease in leases:
                fence = await client.execute_command(
                    "LOCK.FENCE", lease.key, lease.token
                )
                assert fence == lease.fence and not lease.lost.is_set()
            # One scheduler task (plus the batches in flight on a busy machine: 7 was
            # seen), not one per lease (50).
            assert before <= 10
        await client.aclose()

    run(main())


def test_cancelling_around_the_block_leaks_no_lock(url: str) -> None:
    """``wait_for`` cancelling at every point of acquire, block and leaving: after
    100 runs nothing is held."""

    async def main() -> None:
        client = async_client(url, socket_timeout=5)
        locks = fencelock.asyncio.Locks(client)
        holder = await locks.acquire("raced", ttl=30)

        async def use() -> None:
            async with locks.lock("raced", ttl=5, wait=1):
                await asyncio.sleep(0.001)

        async def release_soon() -> None:
            await asyncio.sleep(0.05)
            await locks.release(holder)

        await release_soon()
        for attempt in range(100):
            with contextlib.suppress(asyncio.TimeoutError, LockNotAcquired):
                await asyncio.wait_for(use(), timeout=0.0005 * (attempt % 20))
        await asyncio.sleep(0.2)  # shielded releases still in flight
        assert await client.exists("lock:raced") == 0
        await client.aclose()

    run(main())


def test_asyncio_writer_tokens_per_task(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        rw = fencelock.asyncio.ReadWriteLock(client, "cfg", timeout=30)
        order: list[str] = []

        async def writer(name: str) -> None:
            async with rw.write():
                order.append(f"{name} in")
                await asyncio.sleep(0.1)
                order.append(f"{name} out")

        await asyncio.gather(writer("a"), writer("b"))
        # Each task held the write lock with its own token, one after the other.
        assert order in (
            ["a in", "a out", "b in", "b out"],
            ["b in", "b out", "a in", "a out"],
        )
        assert await client.exists("cfg") == 0
        await client.aclose()

    run(main())


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
