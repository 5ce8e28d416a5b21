"""A lease knows its own deadline, and every way of losing it is told, on both
sides: the clock with the server stopped or restarted without persistence, a refused
refresh, guard or release; leaving the block after a loss raises ``LockLost`` (saying
how it was lost); ``max_hold``, ``min_hold``; no token in a repr or an error; a key of
another type waited for; upgrades refused within one thread or task; a full bounded
pool. Against real servers. What one side does its own way (one refresher thread or
task, ``once``, ``cancel_on_lost``, cancellation) is tests/test_leases.py."""

from __future__ import annotations

import contextlib
import functools
import signal
import time
from pathlib import Path

import pytest
import redis.asyncio
from servers import Server

from fencelock.asyncio import (
    Lease,
    LockLost,
    LockNotAcquired,
    Locks,
    ReadWriteLock,
    WrongMode,
)

from .helpers import drop_in, join, later, set_within, sleep, spawn, until

# The server reads its clock in whole ms, rounded down: a lease may start up to 1 ms
# before its request was sent, and the client counts its deadline 1 ms short.
GRAIN = 0.001


async def test_the_deadline_is_the_send_time_plus_the_ttl(
    r: redis.asyncio.Redis,
) -> None:
    before = time.monotonic()
    lease = await Locks(r).acquire("deadline", ttl=2)
    after = time.monotonic()
    assert before + 2 - GRAIN <= lease.deadline <= after + 2 - GRAIN
    assert lease.acquired_at + 2 - GRAIN == lease.deadline
    assert 1.5 < lease.time_left <= 2


async def test_a_confirmed_refresh_moves_the_deadline_from_its_send_time(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    lease = await locks.acquire("moved", ttl=1)
    await sleep(0.3)
    sent = time.monotonic()
    assert await locks.refresh(lease)
    assert sent + 1 - GRAIN <= lease.deadline <= time.monotonic() + 1 - GRAIN


async def test_the_server_never_ends_a_lease_before_the_clients_deadline(
    r: redis.asyncio.Redis,
) -> None:
    """The server starts a lease by its clock in whole ms, rounded down: an acquire
    sent in the middle of a millisecond and run within it gets a lease that ends up
    to that half millisecond before send time + ttl. Each acquire here is sent in the
    middle of a millisecond of the wall clock (the server's), and the lease's end on
    the server (``PEXPIRETIME``) is compared with the client's deadline, carried
    over to the wall clock at the send: never earlier."""
    locks = Locks(r, session=False)
    for n in range(40):
        while not 0.3 <= (time.time() * 1000) % 1 < 0.6:
            pass
        wall, monotonic = time.time(), time.monotonic()
        lease = await locks.acquire(f"grain:{n}", ttl=10)
        believed_end_ms = (wall + (lease.deadline - monotonic)) * 1000
        server_end_ms = await r.execute_command("PEXPIRETIME", f"lock:grain:{n}")
        # 0.01 ms: the two clocks read one after the other at the send.
        assert server_end_ms >= believed_end_ms - 0.01, (n, believed_end_ms)
        await locks.release(lease)


async def test_a_long_wait_gives_the_lease_a_deadline_from_after_the_grant(
    r: redis.asyncio.Redis,
) -> None:
    """A grant after a 0.6 s wait with a 0.9 s ttl: counted from the send, the lease
    would have only 0.3 s left; the manager confirms it with a refresh instead."""
    locks = Locks(r)
    holder = await locks.acquire("queued", ttl=30)
    later(0.6, locks.release, holder)
    lease = await locks.acquire("queued", ttl=0.9, wait=5)
    assert lease.time_left > 0.8
    lease.ensure_held()


async def test_ensure_held_checks_the_clock_with_the_server_stopped(
    own_server: Server,
) -> None:
    """SIGSTOP: refreshes hang, yet the lease is reported lost at its deadline and
    ensure_held raises from then on, without a round trip."""
    client = redis.asyncio.Redis(port=own_server.port, socket_timeout=5)
    reported: list[tuple[Lease, float]] = []
    locks = Locks(client)

    async def was_reported() -> bool:
        return bool(reported)

    try:
        with pytest.raises(LockLost):
            async with locks.lock(
                "frozen",
                ttl=0.6,
                on_lost=lambda lease: reported.append((lease, time.monotonic())),
            ) as lease:
                own_server.process.send_signal(signal.SIGSTOP)
                try:
                    lease.ensure_held()
                    await until(was_reported, 3, "on_lost at the deadline")
                    assert reported[0][0] is lease
                    assert reported[0][1] - lease.deadline < 0.3, "at the deadline"
                    assert lease.lost.is_set()
                    assert time.monotonic() - lease.deadline < 0.3
                    with pytest.raises(LockLost):
                        lease.ensure_held()
                    with pytest.raises(LockLost):
                        await lease.ensure_held()
                finally:
                    own_server.process.send_signal(signal.SIGCONT)
    finally:
        await client.aclose()


async def test_a_restart_without_persistence_is_found_by_the_clock_or_the_server(
    tmp_path: Path,
) -> None:
    first = Server(tmp_path / "a")
    port = first.port
    client = redis.asyncio.Redis(port=port)
    locks = Locks(client)
    lease = await locks.acquire("restarted", ttl=1.5)
    first.stop()
    second = Server(tmp_path / "b", port=port)
    other_client = redis.asyncio.Redis(port=port)
    try:
        # Another client takes the lock on the empty server at once.
        other = await Locks(other_client).acquire("restarted", ttl=30)
        assert other.fence > lease.fence
        with pytest.raises(LockLost):
            await lease.ensure_held(check=True)
        assert lease.lost.is_set()
        # Without asking, the clock alone ends it no later than the deadline.
        fresh = await locks.acquire("other-key", ttl=0.4)
        await sleep(0.45)
        with pytest.raises(LockLost):
            fresh.ensure_held()
    finally:
        await client.aclose()
        await other_client.aclose()
        second.stop()


async def test_leaving_after_a_loss_raises_lock_lost_after_the_cleanup(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    with pytest.raises(LockLost) as raised:
        async with locks.lock("gone", ttl=30) as lease:
            await r.delete("lock:gone")
            # The next acquire of someone else must not be freed by our leaving.
            other = await locks.acquire("gone", ttl=30)
    assert raised.value.lock_name == "lock:gone"
    assert not lease.released
    fence = await r.execute_command("LOCK.FENCE", "lock:gone", other.token)
    assert fence == other.fence

    async with locks.lock("gone-ok", ttl=30, lost_ok=True) as lease:
        await r.delete("lock:gone-ok")
    assert not lease.released and lease.lost.is_set()


async def test_without_auto_refresh_the_deadline_still_reports(
    r: redis.asyncio.Redis,
) -> None:
    reported: list[Lease] = []
    locks = Locks(r)

    async def was_reported() -> bool:
        return reported == [lease]

    with pytest.raises(LockLost):
        async with locks.lock(
            "short", ttl=0.3, auto_refresh=False, on_lost=reported.append
        ) as lease:
            assert await set_within(lease.lost, 2)
            assert time.monotonic() >= lease.deadline
            await until(was_reported, 2, "on_lost")


async def test_a_refused_guard_and_a_release_that_finds_it_gone_report_the_loss(
    r: redis.asyncio.Redis,
) -> None:
    reported: list[Lease] = []
    locks = Locks(r)
    async with locks.lock(
        "guarded", ttl=30, on_lost=reported.append, lost_ok=True
    ) as lease:
        await r.delete("lock:guarded")
        with pytest.raises(LockLost):
            await lease.guard("SET", "x", 1)
        assert reported == [lease]
    assert await r.get("x") is None

    lease = await locks.acquire("released", ttl=30)
    lease.on_lost = reported.append
    await r.delete("lock:released")
    assert not await locks.release(lease)
    assert reported[-1] is lease and lease.lost.is_set()


async def test_lock_lost_says_a_deleted_lock_was_removed_not_expired(
    r: redis.asyncio.Redis,
) -> None:
    """After a ``DEL`` the server no longer has the lock while its lease still runs:
    the error says someone removed it (the release, a refresh, ``guard`` and
    ``ensure_held(check=True)`` each find it so), never that the lease ran out."""
    locks = Locks(r)
    with pytest.raises(LockLost) as left:
        async with locks.lock("deleted", ttl=30):
            await r.delete("lock:deleted")
    assert left.value.reason == LockLost.GONE
    assert "released or deleted by someone else" in str(left.value), left.value
    assert "deadline" not in str(left.value)

    async with locks.lock("refreshed", ttl=0.6, lost_ok=True) as lease:
        await r.delete("lock:refreshed")
        assert await set_within(lease.lost, 2), "the refresher found it gone"
        assert lease.lost_reason == LockLost.GONE
        with pytest.raises(LockLost) as raised:
            lease.ensure_held()
    assert raised.value.reason == LockLost.GONE

    # Found gone by the refresher while the block waits: the same on leaving.
    with pytest.raises(LockLost) as removed:
        async with locks.lock("deleted", ttl=0.6):
            await r.delete("lock:deleted")
            await sleep(0.5)  # the refresher finds it gone
    assert removed.value.reason == LockLost.GONE
    assert "released or deleted by someone else" in str(removed.value)

    for found in ("guard", "check"):
        lease = await locks.acquire(found, ttl=30)
        await r.delete(f"lock:{found}")
        with pytest.raises(LockLost) as raised:
            if found == "guard":
                await lease.guard("SET", "x", 1)
            else:
                await lease.ensure_held(check=True)
        assert raised.value.reason == LockLost.GONE, found
        assert "released or deleted by someone else" in str(raised.value)


async def test_lock_lost_says_a_deadline_passed(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(LockLost) as raised:
        async with locks.lock("late", ttl=0.3, auto_refresh=False) as lease:
            assert await set_within(lease.lost, 2)
    assert raised.value.reason == LockLost.DEADLINE
    assert lease.lost_reason == LockLost.DEADLINE
    assert "deadline passed with no refresh confirmed" in str(raised.value)
    # Left after the deadline without waiting for the report: the same.
    with pytest.raises(LockLost) as late:
        async with locks.lock("late", ttl=0.3, auto_refresh=False):
            await sleep(0.5)
    assert late.value.reason == LockLost.DEADLINE
    # A drop-in lock has no deadline to go by: the server's refusal says what it can.
    lock = drop_in(r, "drop-in", timeout=30)
    assert await lock.acquire()
    await r.delete("drop-in")
    with pytest.raises(LockLost) as refused:
        await lock.guard("SET", "x", 1)
    assert refused.value.reason == LockLost.NOT_HELD
    assert "its lease ended, or it was released or deleted" in str(refused.value)


async def test_max_hold_stops_refreshing(r: redis.asyncio.Redis) -> None:
    reported: list[Lease] = []
    locks = Locks(r)
    start = time.monotonic()
    with pytest.raises(LockLost):
        async with locks.lock(
            "hung-job", ttl=0.3, max_hold=0.5, on_lost=reported.append
        ) as lease:
            assert await set_within(lease.lost, 3)
            lost_after = time.monotonic() - start
    # The last refresh goes out before 0.5 s, the lease then runs out by 0.8 s.
    assert 0.5 <= lost_after < 1.2
    assert reported == [lease]
    assert await r.exists("lock:hung-job") == 0


async def test_min_hold_applies_only_when_the_block_succeeded(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    async with locks.lock("cron-ok", ttl=10, min_hold=5):
        pass
    assert 4000 < await r.pttl("lock:cron-ok") <= 5000
    with pytest.raises(RuntimeError):
        async with locks.lock("cron-failed", ttl=10, min_hold=5):
            raise RuntimeError("the job failed: another server may retry it")
    assert await r.exists("lock:cron-failed") == 0


async def test_repr_and_errors_never_show_the_token(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    lease = await locks.acquire("secret", ttl=30, token="s3cr3t-token-value")
    assert "s3cr3t" not in repr(lease)
    lock = drop_in(r, "lock:secret", timeout=5, blocking=False)
    assert not await lock.acquire(token="s3cr3t-token-value-2")
    assert "s3cr3t" not in repr(lock)
    with pytest.raises(LockNotAcquired) as raised:
        await locks.acquire("secret", ttl=30, token="s3cr3t-other")
    assert raised.value.lock_name == "lock:secret"
    assert "s3cr3t" not in str(raised.value)


async def test_once_refuses_unknown_options_before_taking_any_lock(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    with pytest.raises(TypeError):
        locks.once("job", ttl=30, wait=5)  # type: ignore[call-arg]
    assert await r.exists("lock:job") == 0


async def test_a_key_of_another_type_is_busy_for_the_manager_too(
    r: redis.asyncio.Redis,
) -> None:
    """An old redis-py lock at the key (mid-migration): waited for by polling, as
    the drop-in does, and LockNotAcquired when it stays."""
    old = r.lock("lock:report", timeout=30, thread_local=False)
    assert await old.acquire()
    locks = Locks(r)
    with pytest.raises(LockNotAcquired):
        await locks.acquire("report", ttl=30, wait=0.3)
    later(0.3, old.release)
    async with locks.lock("report", ttl=30, wait=3) as lease:
        assert lease.fence > 0


async def test_an_upgrade_in_the_same_thread_is_refused_at_once(
    r: redis.asyncio.Redis,
) -> None:
    """Within one thread (or task) a read lock is not upgraded: refused at once, not
    waited for forever."""
    rw = ReadWriteLock(r, "config", timeout=30)
    async with rw.read():
        start = time.monotonic()
        with pytest.raises(WrongMode) as raised:
            async with rw.write():
                pytest.fail("upgraded")
        assert time.monotonic() - start < 0.5
        assert raised.value.mode == "shared"
    # Another thread's reader is waited for, as always.
    async with rw.write():
        pass


async def test_an_acquire_that_would_wait_for_its_own_thread_is_refused_at_once(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    start = time.monotonic()
    async with locks.lock("cfg", ttl=30, shared=True):
        with pytest.raises(WrongMode) as raised:
            # An upgrade: would wait forever.
            await locks.acquire("cfg", ttl=30, wait=None)
        assert raised.value.mode == "shared" and "s3" not in str(raised.value)
        async with locks.lock("cfg", ttl=30, shared=True):  # readers together: fine
            pass
    async with locks.lock("cfg", ttl=30):
        with pytest.raises(WrongMode):
            await locks.acquire("cfg", ttl=30, shared=True, wait=10)  # a downgrade
        with pytest.raises(WrongMode):
            await locks.acquire("cfg", ttl=30, wait=10)  # itself again
    assert time.monotonic() - start < 1
    # Another thread (or task) still just waits its turn.
    async with locks.lock("cfg", ttl=30):
        outcome: list[str] = []

        async def other_waiter() -> None:
            try:
                await locks.acquire("cfg", ttl=30, wait=0.2)
            except LockNotAcquired:
                outcome.append("waited, busy")

        other, _ = spawn(other_waiter)
        await join(other, 5)
        assert outcome == ["waited, busy"]
    rw = ReadWriteLock(r, "rw", timeout=30)
    async with rw.write():
        with pytest.raises(WrongMode):
            async with rw.read():
                pytest.fail("downgraded")


async def test_a_full_bounded_pool_does_not_starve_the_refresher(
    server: Server, r: redis.asyncio.Redis
) -> None:
    """A pool of two, both connections taken for seconds: a waiter in the queue on
    one (the pool had room for it), a long command of the application's own on the
    other. The lease already held is still refreshed: the refresher has a connection
    of its own."""
    pool = redis.asyncio.BlockingConnectionPool(
        port=server.port, max_connections=2, timeout=5
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    locks = Locks(client)
    blocker = await Locks(r).acquire("b", ttl=30)

    async def wait_for_b() -> None:
        with contextlib.suppress(LockNotAcquired):  # b stays held: it waits 4 s
            await locks.acquire("b", ttl=5, wait=4)

    async def long_command() -> None:
        await client.blpop(["never"], timeout=4)

    async def waiting() -> bool:
        return bool((await r.execute_command("LOCK.INFO", "lock:b"))[7] == 1)

    async def long_command_running() -> bool:
        entries = await r.client_list()
        return sum(1 for entry in entries if entry.get("cmd") == "blpop") == 1

    async with locks.lock("a", ttl=1) as lease:
        waiter, _ = spawn(wait_for_b)
        await until(waiting, 5, "the waiter")
        other, _ = spawn(long_command)
        await until(long_command_running, 5, "the long command")
        await sleep(2.5)  # more than twice the ttl
        await lease.ensure_held(check=False)
        assert not lease.lost.is_set()
        fence = await r.execute_command("LOCK.FENCE", "lock:a", lease.token)
        assert fence == lease.fence
    await Locks(r).release(blocker)
    for started in (waiter, other):
        await join(started, 10)
    await client.aclose()


async def test_waiters_filling_the_pool_cannot_keep_holders_from_releasing(
    server: Server,
) -> None:
    """30 waiters (tasks, or threads) queue for one lock through a pool of 5: the
    waiters hold all pooled connections but the one they leave free (those that find
    no room try now and then), yet each holder leaves at once, on the manager's own
    connection, so every waiter gets its turn (none waits for a lease to run out)."""
    pool = redis.asyncio.BlockingConnectionPool(
        port=server.port, max_connections=5, timeout=5
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    locks = Locks(client)
    done: list[int] = []

    async def worker(n: int) -> None:
        # A waiter that finds the pool full waits for a pooled connection first.
        async with locks.lock("one", ttl=10, wait=30):
            done.append(n)

    start = time.monotonic()
    workers = [spawn(functools.partial(worker, n)) for n in range(30)]
    for started, _ in workers:
        await join(started, 30)
    assert sorted(done) == list(range(30)), [outcome for _, outcome in workers]
    assert time.monotonic() - start < 8, "no holder waited for its lease to end"
    await client.aclose()
