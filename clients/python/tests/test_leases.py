"""A lease knows its own deadline, and every way of losing it is told: the clock with
the server stopped or restarted without persistence, a refused refresh, guard or
release; leaving the block after a loss raises ``LockLost``; ``max_hold``,
``min_hold``, ``cancel_on_lost``; one refresher for all leases of a manager; the
run-once decorator. Sync and asyncio, against real servers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio
from conftest import async_client, run
from servers import Server, wait_until

import fencelock
import fencelock.asyncio
from fencelock import Lease, LockLost, LockNotAcquired, Locks
from fencelock._sync._refresher import thread_name


def refresher_threads(client: redis.Redis) -> list[threading.Thread]:
    name = thread_name(client)
    return [t for t in threading.enumerate() if t.name == name]


def test_the_deadline_is_the_send_time_plus_the_ttl(r: redis.Redis) -> None:
    before = time.monotonic()
    lease = Locks(r).acquire("deadline", ttl=2)
    after = time.monotonic()
    assert before + 2 <= lease.deadline <= after + 2
    assert lease.acquired_at + 2 == lease.deadline
    assert 1.5 < lease.time_left <= 2


def test_a_confirmed_refresh_moves_the_deadline_from_its_send_time(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    lease = locks.acquire("moved", ttl=1)
    time.sleep(0.3)
    sent = time.monotonic()
    assert locks.refresh(lease)
    assert sent + 1 <= lease.deadline <= time.monotonic() + 1


def test_a_long_wait_gives_the_lease_a_deadline_from_after_the_grant(
    r: redis.Redis,
) -> None:
    """A grant after a 0.6 s wait with a 0.9 s ttl: counted from the send, the lease
    would have only 0.3 s left; the manager confirms it with a refresh instead."""
    locks = Locks(r)
    holder = locks.acquire("queued", ttl=30)
    threading.Timer(0.6, locks.release, args=(holder,)).start()
    lease = locks.acquire("queued", ttl=0.9, wait=5)
    assert lease.time_left > 0.8
    lease.ensure_held()


def test_ensure_held_checks_the_clock_with_the_server_stopped(
    own_server: Server,
) -> None:
    """SIGSTOP: refreshes hang, yet the lease is reported lost at its deadline and
    ensure_held raises from then on, without a round trip."""
    client = own_server.client(socket_timeout=5)
    reported: list[tuple[Lease, float]] = []
    locks = Locks(client)
    with pytest.raises(LockLost):  # noqa: SIM117 (the block must be the one left)
        with locks.lock(
            "frozen",
            ttl=0.6,
            on_lost=lambda lease: reported.append((lease, time.monotonic())),
        ) as lease:
            own_server.process.send_signal(signal.SIGSTOP)
            try:
                lease.ensure_held()
                wait_until(lambda: bool(reported), 3, "on_lost at the deadline")
                assert reported[0][0] is lease
                assert reported[0][1] - lease.deadline < 0.3, "reported at the deadline"
                assert lease.lost.is_set()
                with pytest.raises(LockLost):
                    lease.ensure_held()
            finally:
                own_server.process.send_signal(signal.SIGCONT)


def test_a_restart_without_persistence_is_found_by_the_clock_or_the_server(
    tmp_path: Path,
) -> None:
    first = Server(tmp_path / "a")
    port = first.port
    client = redis.Redis(port=port)
    locks = Locks(client)
    lease = locks.acquire("restarted", ttl=1.5)
    first.stop()
    second = Server(tmp_path / "b", port=port)
    try:
        # Another client takes the lock on the empty server at once.
        other = Locks(redis.Redis(port=port)).acquire("restarted", ttl=30)
        assert other.fence > lease.fence
        with pytest.raises(LockLost):
            lease.ensure_held(check=True)
        assert lease.lost.is_set()
        # Without asking, the clock alone ends it no later than the deadline.
        fresh = locks.acquire("other-key", ttl=0.4)
        time.sleep(0.45)
        with pytest.raises(LockLost):
            fresh.ensure_held()
    finally:
        client.close()
        second.stop()


def test_leaving_after_a_loss_raises_lock_lost_after_the_cleanup(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    with pytest.raises(LockLost) as raised:  # noqa: SIM117
        with locks.lock("gone", ttl=30) as lease:
            r.delete("lock:gone")
            # The next acquire of someone else must not be freed by our leaving.
            other = locks.acquire("gone", ttl=30)
    assert raised.value.lock_name == "lock:gone"
    assert not lease.released
    assert r.execute_command("LOCK.FENCE", "lock:gone", other.token) == other.fence

    with locks.lock("gone-ok", ttl=30, lost_ok=True) as lease:
        r.delete("lock:gone-ok")
    assert not lease.released and lease.lost.is_set()


def test_without_auto_refresh_the_deadline_still_reports(r: redis.Redis) -> None:
    reported: list[Lease] = []
    locks = Locks(r)
    with pytest.raises(LockLost):  # noqa: SIM117
        with locks.lock(
            "short", ttl=0.3, auto_refresh=False, on_lost=reported.append
        ) as lease:
            assert lease.lost.wait(2)
            assert time.monotonic() >= lease.deadline
            wait_until(lambda: reported == [lease], 2, "on_lost")


def test_a_refused_guard_and_a_release_that_finds_it_gone_report_the_loss(
    r: redis.Redis,
) -> None:
    reported: list[Lease] = []
    locks = Locks(r)
    with locks.lock("guarded", ttl=30, on_lost=reported.append, lost_ok=True) as lease:
        r.delete("lock:guarded")
        with pytest.raises(LockLost):
            lease.guard("SET", "x", 1)
        assert reported == [lease]
    assert r.get("x") is None

    lease = locks.acquire("released", ttl=30)
    lease.on_lost = reported.append
    r.delete("lock:released")
    assert not locks.release(lease)
    assert reported[-1] is lease and lease.lost.is_set()


def test_lock_lost_says_a_deleted_lock_was_removed_not_expired(
    r: redis.Redis,
) -> None:
    """After a ``DEL`` the server no longer has the lock while its lease still runs:
    the error says someone removed it (the release, a refresh, ``guard`` and
    ``ensure_held(check=True)`` each find it so), never that the lease ran out."""
    locks = Locks(r)
    with pytest.raises(LockLost) as left:  # noqa: SIM117
        with locks.lock("deleted", ttl=30):
            r.delete("lock:deleted")
    assert left.value.reason == LockLost.GONE
    assert "released or deleted by someone else" in str(left.value), left.value
    assert "deadline" not in str(left.value)

    with locks.lock("refreshed", ttl=0.6, lost_ok=True) as lease:
        r.delete("lock:refreshed")
        assert lease.lost.wait(2), "the refresher found it gone"
        assert lease.lost_reason == LockLost.GONE
        with pytest.raises(LockLost) as raised:
            lease.ensure_held()
    assert raised.value.reason == LockLost.GONE

    for found in ("guard", "check"):
        lease = locks.acquire(found, ttl=30)
        r.delete(f"lock:{found}")
        with pytest.raises(LockLost) as raised:
            if found == "guard":
                lease.guard("SET", "x", 1)
            else:
                lease.ensure_held(check=True)
        assert raised.value.reason == LockLost.GONE, found
        assert "released or deleted by someone else" in str(raised.value)


def test_lock_lost_says_a_deadline_passed(r: redis.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(LockLost) as raised:  # noqa: SIM117
        with locks.lock("late", ttl=0.3, auto_refresh=False) as lease:
            assert lease.lost.wait(2)
    assert raised.value.reason == LockLost.DEADLINE
    assert lease.lost_reason == LockLost.DEADLINE
    assert "deadline passed with no refresh confirmed" in str(raised.value)
    # A drop-in lock has no deadline to go by: the server's refusal says what it can.
    lock = r.lock("drop-in", timeout=30, lock_class=fencelock.Lock)
    assert lock.acquire()
    r.delete("drop-in")
    with pytest.raises(LockLost) as refused:
        lock.guard("SET", "x", 1)
    assert refused.value.reason == LockLost.NOT_HELD
    assert "its lease ended, or it was released or deleted" in str(refused.value)


def test_asyncio_lock_lost_says_how_it_was_lost(url: str, r: redis.Redis) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        with pytest.raises(LockLost) as removed:
            async with locks.lock("deleted", ttl=0.6):
                r.delete("lock:deleted")
                await asyncio.sleep(0.5)  # the refresher finds it gone
        assert removed.value.reason == LockLost.GONE
        assert "released or deleted by someone else" in str(removed.value)
        with pytest.raises(LockLost) as late:
            async with locks.lock("late", ttl=0.3, auto_refresh=False):
                await asyncio.sleep(0.5)
        assert late.value.reason == LockLost.DEADLINE
        await client.aclose()

    run(main())


def test_max_hold_stops_refreshing(r: redis.Redis) -> None:
    reported: list[Lease] = []
    locks = Locks(r)
    start = time.monotonic()
    with pytest.raises(LockLost):  # noqa: SIM117
        with locks.lock(
            "hung-job", ttl=0.3, max_hold=0.5, on_lost=reported.append
        ) as lease:
            assert lease.lost.wait(3)
            lost_after = time.monotonic() - start
    # The last refresh goes out before 0.5 s, the lease then runs out by 0.8 s.
    assert 0.5 <= lost_after < 1.2
    assert reported == [lease]
    assert r.exists("lock:hung-job") == 0


def test_min_hold_applies_only_when_the_block_succeeded(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("cron-ok", ttl=10, min_hold=5):
        pass
    assert 4000 < r.pttl("lock:cron-ok") <= 5000
    with pytest.raises(RuntimeError), locks.lock("cron-failed", ttl=10, min_hold=5):
        raise RuntimeError("the job failed: another server may retry it")
    assert r.exists("lock:cron-failed") == 0


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


def test_asyncio_deadline_with_the_server_stopped(own_server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(port=own_server.port, socket_timeout=5)
        locks = fencelock.asyncio.Locks(client)
        with pytest.raises(LockLost):
            async with locks.lock("frozen", ttl=0.6) as lease:
                own_server.process.send_signal(signal.SIGSTOP)
                try:
                    await asyncio.wait_for(lease.lost.wait(), 3)
                    assert time.monotonic() - lease.deadline < 0.3
                    with pytest.raises(LockLost):
                        lease.ensure_held()
                    with pytest.raises(LockLost):
                        await lease.ensure_held()
                finally:
                    own_server.process.send_signal(signal.SIGCONT)
        await client.aclose()

    run(main())


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


def test_repr_and_errors_never_show_the_token(r: redis.Redis) -> None:
    locks = Locks(r)
    lease = locks.acquire("secret", ttl=30, token="s3cr3t-token-value")
    assert "s3cr3t" not in repr(lease)
    lock = r.lock("lock:secret", lock_class=fencelock.Lock, timeout=5, blocking=False)
    assert not lock.acquire(token="s3cr3t-token-value-2")
    assert "s3cr3t" not in repr(lock)
    with pytest.raises(LockNotAcquired) as raised:
        locks.acquire("secret", ttl=30, token="s3cr3t-other")
    assert raised.value.lock_name == "lock:secret"
    assert "s3cr3t" not in str(raised.value)


def test_an_upgrade_in_the_same_thread_is_refused_at_once(r: redis.Redis) -> None:
    rw = fencelock.ReadWriteLock(r, "config", timeout=30)
    with rw.read():
        start = time.monotonic()
        with pytest.raises(fencelock.WrongMode) as raised, rw.write():
            pytest.fail("upgraded")
        assert time.monotonic() - start < 0.5
        assert raised.value.mode == "shared"
    # Another thread's reader is waited for, as always.
    with rw.write():
        pass


def test_asyncio_upgrade_refused_and_writer_tokens_per_task(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        rw = fencelock.asyncio.ReadWriteLock(client, "cfg", timeout=30)
        async with rw.read():
            with pytest.raises(fencelock.WrongMode):
                async with rw.write():
                    pytest.fail("upgraded")

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


def test_once_refuses_unknown_options_before_taking_any_lock(r: redis.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(TypeError):
        locks.once("job", ttl=30, wait=5)  # type: ignore[call-arg]
    assert r.exists("lock:job") == 0


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


def test_a_full_bounded_pool_does_not_starve_the_refresher(
    server: Server, r: redis.Redis
) -> None:
    """A pool of two, both connections taken for seconds: a waiter in the queue on
    one (the pool had room for it), a long command of the application's own on the
    other. The lease already held is still refreshed: the refresher has a connection
    of its own."""
    pool = redis.BlockingConnectionPool(port=server.port, max_connections=2, timeout=5)
    client = redis.Redis(connection_pool=pool)
    locks = Locks(client)
    blocker = Locks(r).acquire("b", ttl=30)

    def wait_for_b() -> None:
        with contextlib.suppress(LockNotAcquired):  # b stays held: it waits 4 s
            locks.acquire("b", ttl=5, wait=4)

    def long_command() -> None:
        client.blpop(["never"], timeout=4)

    def blocked(command: str) -> int:
        return sum(1 for entry in r.client_list() if entry.get("cmd") == command)

    waiter = threading.Thread(target=wait_for_b, daemon=True)
    other = threading.Thread(target=long_command, daemon=True)
    with locks.lock("a", ttl=1) as lease:
        waiter.start()
        wait_until(
            lambda: r.execute_command("LOCK.INFO", "lock:b")[7] == 1, 5, "the waiter"
        )
        other.start()
        wait_until(lambda: blocked("blpop") == 1, 5, "the long command")
        time.sleep(2.5)  # more than twice the ttl
        lease.ensure_held(check=False)
        assert not lease.lost.is_set()
        assert r.execute_command("LOCK.FENCE", "lock:a", lease.token) == lease.fence
    Locks(r).release(blocker)
    for thread in (waiter, other):
        thread.join(10)
    client.close()


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


def test_waiters_filling_the_pool_cannot_keep_holders_from_releasing(
    server: Server,
) -> None:
    """30 tasks queue for one lock through a pool of 5: the waiters hold all pooled
    connections but the one they leave free (those that find no room try now and
    then), yet each holder leaves at once, on the manager's own connection, so every
    task gets its turn (none waits for a lease to run out)."""

    async def main() -> None:
        pool = redis.asyncio.BlockingConnectionPool(
            port=server.port, max_connections=5, timeout=5
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        locks = fencelock.asyncio.Locks(client)
        done: list[int] = []

        async def worker(n: int) -> None:
            # A waiter that finds the pool full waits for a pooled connection first.
            async with locks.lock("one", ttl=10, wait=30):
                done.append(n)

        start = time.monotonic()
        await asyncio.gather(*(worker(n) for n in range(30)))
        assert sorted(done) == list(range(30))
        assert time.monotonic() - start < 8, "no holder waited for its lease to end"
        await client.aclose()

    run(main())


def test_an_acquire_that_would_wait_for_its_own_thread_is_refused_at_once(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    start = time.monotonic()
    with locks.lock("cfg", ttl=30, shared=True):
        with pytest.raises(fencelock.WrongMode) as raised:
            locks.acquire("cfg", ttl=30, wait=None)  # an upgrade: would wait forever
        assert raised.value.mode == "shared" and "s3" not in str(raised.value)
        with locks.lock("cfg", ttl=30, shared=True):  # readers together: fine
            pass
    with locks.lock("cfg", ttl=30):
        with pytest.raises(fencelock.WrongMode):
            locks.acquire("cfg", ttl=30, shared=True, wait=10)  # a downgrade
        with pytest.raises(fencelock.WrongMode):
            locks.acquire("cfg", ttl=30, wait=10)  # itself again
    assert time.monotonic() - start < 1
    # Another thread still just waits its turn.
    with locks.lock("cfg", ttl=30):
        outcome: list[str] = []

        def other_thread() -> None:
            try:
                locks.acquire("cfg", ttl=30, wait=0.2)
            except LockNotAcquired:
                outcome.append("waited, busy")

        other = threading.Thread(target=other_thread)
        other.start()
        other.join(5)
        assert outcome == ["waited, busy"]
    rw = fencelock.ReadWriteLock(r, "rw", timeout=30)
    with rw.write(), pytest.raises(fencelock.WrongMode), rw.read():
        pytest.fail("downgraded")


def test_a_key_of_another_type_is_busy_for_the_manager_too(r: redis.Redis) -> None:
    """An old redis-py lock at the key (mid-migration): waited for by polling, as
    the drop-in does, and LockNotAcquired when it stays."""
    old = r.lock("lock:report", timeout=30, thread_local=False)
    assert old.acquire()
    locks = Locks(r)
    with pytest.raises(LockNotAcquired):
        locks.acquire("report", ttl=30, wait=0.3)
    threading.Timer(0.3, old.release).start()
    with locks.lock("report", ttl=30, wait=3) as lease:
        assert lease.fence > 0


def test_asyncio_upgrade_through_the_manager_is_refused(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        async with locks.lock("cfg", ttl=30, shared=True):
            with pytest.raises(fencelock.WrongMode):
                await locks.acquire("cfg", ttl=30, wait=None)
        await client.aclose()

    run(main())
