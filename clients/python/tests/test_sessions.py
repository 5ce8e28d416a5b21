"""Sessions (``Locks(client, session=True)``, the default): one ``LOCK.KEEPALIVE`` per
server and interval keeps every lock of a manager's blocks alive, the leases of a
session are lost together, ``close()`` (and leaving ``with Locks(...)``) releases them
all with ``LOCK.CLOSE``, ``lock_delay`` quarantines a lock whose holder stopped,
``session=False`` keeps the refresh per lease; sync and asyncio, against real servers
(what they executed is read from ``INFO commandstats`` and ``MONITOR``). What both
sides do alike is tests/_async/test_sessions.py (the sync side generated from it)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from conftest import async_client, run
from monitor import Monitor
from servers import Server, wait_until

import fencelock
import fencelock.asyncio
from fencelock import Lease, LockLost, LockNotAcquired, Locks, WrongSession


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``)."""
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


class Counts:
    """The session commands and refreshes a server ran since this was made."""

    NAMES = ("lock.keepalive", "lock.refresh", "lock.held", "lock.close")

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.before = {name: calls(client, name) for name in self.NAMES}

    def __getitem__(self, name: str) -> int:
        return calls(self.client, name) - self.before[name]


def held_by(client: redis.Redis, session: str) -> list[Any]:
    return list(client.execute_command("LOCK.HELD", session))


def holds(client: redis.Redis, lease: Lease) -> bool:
    return bool(client.execute_command("LOCK.FENCE", lease.key, lease.token))


def waiting(client: redis.Redis, names: list[str]) -> int:
    """How many acquires wait in the queues of the locks ``names``."""
    infos = [fencelock.lock_info(client, f"lock:{name}") for name in names]
    return sum(info["waiters"] for info in infos if info is not None)


def mode(client: redis.Redis, name: str) -> Any:
    info = fencelock.lock_info(client, f"lock:{name}")
    return None if info is None else info["mode"]


# ---------------------------------------------------------------------------------
# One heartbeat for many locks (200 of them: tests/_async/test_sessions.py)
# ---------------------------------------------------------------------------------


def test_locks_of_different_ttls_keep_their_own(r: redis.Redis) -> None:
    """Each keepalive gives a lock its own ttl again: locks of two ttls are two
    sessions, one keepalive each per interval."""
    locks = Locks(r)
    with locks.lock("short", ttl=0.3) as short, locks.lock("long", ttl=30) as long:
        assert short.session != long.session
        time.sleep(0.5)
        assert 100 < r.pttl("lock:short") <= 300
        assert 29_000 < r.pttl("lock:long") <= 30_000
        assert not short.lost.is_set() and not long.lost.is_set()


def test_a_session_ttl_of_the_manager(r: redis.Redis) -> None:
    """With ``session_ttl`` one session holds every lock; the first grant is the
    lock's own ttl, every keepalive gives it ``session_ttl``."""
    locks = Locks(r, session_ttl=0.6)
    with locks.lock("a", ttl=30) as a, locks.lock("b", ttl=0.3) as b:
        assert a.session == b.session
        assert r.pttl("lock:a") > 29_000
        time.sleep(0.5)  # the keepalives of b (due after 0.1 s) moved a too
        assert 300 < r.pttl("lock:a") <= 600 and 300 < r.pttl("lock:b") <= 600
        assert a.time_left <= 0.6 and not a.lost.is_set() and not b.lost.is_set()


# ---------------------------------------------------------------------------------
# Lost together
# ---------------------------------------------------------------------------------


def test_a_stopped_server_loses_the_session_at_its_deadline(own_server: Server) -> None:
    client = own_server.client(socket_timeout=5)
    locks = Locks(client)
    reported: list[tuple[Lease, float]] = []

    def on_lost(lease: Lease) -> None:
        reported.append((lease, time.monotonic()))

    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(
                locks.lock(f"s{i}", ttl=0.6, on_lost=on_lost, lost_ok=True)
            )
            for i in range(50)
        ]
        time.sleep(0.7)  # past the first ttl: the keepalives hold them
        own_server.process.send_signal(signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            wait_until(lambda: len(reported) == 50, 3, "every lease reported lost")
        finally:
            own_server.process.send_signal(signal.SIGCONT)
        times = [at for _, at in reported]
        assert max(times) - min(times) < 0.1, "reported together"
        assert min(times) - stopped <= 0.6 + 0.1, "at the session's deadline"
        assert {lease.lost_reason for lease in leases} == {LockLost.DEADLINE}
        with pytest.raises(LockLost):
            leases[7].ensure_held()
    client.close()


def test_a_keepalive_that_finds_nothing_loses_every_lease(r: redis.Redis) -> None:
    """Someone deleted every key (a restart without persistence, a failover would do
    the same): the next keepalive answers 0, and all are lost at once."""
    locks = Locks(r)
    reported: list[Lease] = []
    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(
                locks.lock(f"gone{i}", ttl=0.6, on_lost=reported.append, lost_ok=True)
            )
            for i in range(20)
        ]
        r.delete(*(lease.key for lease in leases))
        deleted = time.monotonic()
        wait_until(lambda: len(reported) == 20, 2, "all reported")
        assert time.monotonic() - deleted < 0.2 + 0.15, "within one interval"
        assert {lease.lost_reason for lease in leases} == {LockLost.GONE}
        # The manager's next locks are in a new session.
        with locks.lock("after", ttl=0.6) as after:
            assert after.session not in {lease.session for lease in leases}


def test_fewer_than_held_loses_only_the_missing_ones(any_r: redis.Redis) -> None:
    """A keepalive that kept fewer holdings than the manager holds there: one
    ``LOCK.HELD`` says which, only those are lost (a DEL of one lock does not end the
    other nine). With and without ``decode_responses``."""
    r = any_r
    locks = Locks(r)
    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(locks.lock(f"part{i}", ttl=0.3, lost_ok=True))
            for i in range(10)
        ]
        counts = Counts(r)
        r.delete(leases[3].key)
        assert leases[3].lost.wait(1)
        assert leases[3].lost_reason == LockLost.GONE
        time.sleep(0.3)
        assert counts["lock.held"] == 1
        kept = [lease for i, lease in enumerate(leases) if i != 3]
        assert not [lease for lease in kept if lease.lost.is_set()]
        assert all(holds(r, lease) for lease in kept)
        assert len(held_by(r, kept[0].session or "")) == 9


CHILD = r"""
import contextlib, sys, time
import redis, fencelock

port, count, ttl = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
delay = sys.argv[4]
locks = fencelock.Locks(
    redis.Redis(port=port), lock_delay=None if delay == "-" else float(delay)
)
lost = []
with contextlib.ExitStack() as stack:
    for i in range(count):
        stack.enter_context(locks.lock(
            f"child:{i}", ttl=ttl, lost_ok=True,
            on_lost=lambda lease: lost.append(lease.lost_reason),
        ))
    print("ready", flush=True)
    sys.stdin.readline()
    until = time.monotonic() + 2  # woken from a pause: the refresher reports soon
    while len(lost) < count and time.monotonic() < until:
        time.sleep(0.01)
    print("lost", len(lost), ",".join(sorted(set(lost))), flush=True)
"""


@contextlib.contextmanager
def child_holding(
    port: int, count: int, ttl: float, lock_delay: str = "-"
) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``child:0`` .. ``child:<count-1>`` in a session."""
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(port), str(count), str(ttl), lock_delay],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()


def grants_after(url: str, names: list[str], wait: float) -> Callable[[], list[float]]:
    """Waiters of another manager, queued now (in a thread of their own): when each
    was granted (monotonic), once ``collect()`` is called."""
    granted: list[float] = []

    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)

        async def one(name: str) -> None:
            await locks.acquire(name, ttl=5, wait=wait)
            granted.append(time.monotonic())

        try:
            await asyncio.gather(*(one(name) for name in names))
        finally:
            await client.aclose()

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()

    def collect() -> list[float]:
        thread.join(wait + 5)
        return granted

    return collect


def test_a_killed_holder_frees_every_lock_within_its_ttl(
    server: Server, r: redis.Redis
) -> None:
    """50 locks of a process kept alive by its keepalives alone for four ttls, then
    the process killed: every waiter is granted its lock within the ttl after the
    last keepalive."""
    ttl, count = 0.4, 50
    with child_holding(server.port, count, ttl) as child:
        names = [f"child:{i}" for i in range(count)]
        collect = grants_after(server.url, names, wait=5)
        wait_until(lambda: waiting(r, names) == count, 5, "every waiter queued")
        time.sleep(4 * ttl)
        infos = [fencelock.lock_info(r, f"lock:{name}") for name in names]
        assert all(info and info["held"] and info["in_session"] == 1 for info in infos)
        child.kill()
        killed = time.monotonic()
        granted = collect()
    assert len(granted) == count
    assert max(granted) - killed <= ttl + 0.3


def test_a_paused_holder_is_not_overlapped_for_the_lock_delay(
    server: Server, r: redis.Redis
) -> None:
    """A holder stopped (SIGSTOP: a GC pause, a frozen VM) loses its lease a ttl after
    its last keepalive; with ``lock_delay`` nobody gets the lock for that much longer,
    then the waiter is served. Woken, the holder reports the lease lost."""
    ttl, delay = 0.3, 0.8
    with child_holding(server.port, 1, ttl, lock_delay=str(delay)) as child:
        collect = grants_after(server.url, ["child:0"], wait=5)
        wait_until(lambda: waiting(r, ["child:0"]) == 1, 5, "the waiter queued")
        time.sleep(2 * ttl)
        child.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            wait_until(lambda: mode(r, "child:0") == "quarantined", 2, "quarantine")
            seen = time.monotonic()
            info = fencelock.lock_info(r, "lock:child:0")
            (granted,) = collect()
        finally:
            child.send_signal(signal.SIGCONT)
        assert info is not None and not info["held"] and info["fence"] is None
        left = (info["ttl_ms"] or 0) / 1000
        assert 0 < left <= delay
        assert seen - stopped <= ttl + 0.2, "the lease ran out a ttl after the pause"
        # Nobody had it for the rest of the quarantine; the waiter right after.
        assert seen + left - 0.02 <= granted <= seen + left + 0.25
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["lost", "1", "deadline"]


# ---------------------------------------------------------------------------------
# close()
# ---------------------------------------------------------------------------------


def test_close_releases_every_lock_and_the_waiters_get_them(r: redis.Redis) -> None:
    locks, others = Locks(r), Locks(r)
    acquired = [locks.acquire(f"c{i}", ttl=30, session=True) for i in range(19)]
    in_block: list[Lease] = []
    left_with: list[BaseException] = []
    entered, closed = threading.Event(), threading.Event()

    def block() -> None:
        try:
            with locks.lock("c19", ttl=30, on_lost=in_block.append) as lease:
                entered.set()
                closed.wait(5)
                assert lease.lost.is_set()
        except BaseException as error:
            left_with.append(error)

    blocker = threading.Thread(target=block)
    blocker.start()
    assert entered.wait(5)
    theirs = others.acquire("theirs", ttl=30)
    own_wait: list[BaseException] = []

    def own_waiter() -> None:  # a waiting acquire of the session: answered nil
        try:
            locks.acquire("theirs", ttl=30, wait=5, session=True)
        except BaseException as error:
            own_wait.append(error)

    waiter = threading.Thread(target=own_waiter)
    waiter.start()
    names = [f"c{i}" for i in range(20)]
    granted: dict[str, float] = {}

    def wait_for(name: str) -> None:
        others.acquire(name, ttl=30, wait=5)
        granted[name] = time.monotonic()

    waiters = [threading.Thread(target=wait_for, args=(name,)) for name in names]
    for thread in waiters:
        thread.start()
    wait_until(
        lambda: waiting(r, names) == 20 and waiting(r, ["theirs"]) == 1,
        5,
        "the waiters queued",
    )
    counts = Counts(r)
    start = time.monotonic()
    locks.close()
    closed.set()
    for thread in [*waiters, waiter, blocker]:
        thread.join(5)
    assert counts["lock.close"] == 1
    assert sorted(granted) == sorted(names)
    assert max(granted.values()) - start < 0.2
    assert all(lease.released and lease.lost_reason == "closed" for lease in acquired)
    assert [lease.key for lease in in_block] == ["lock:c19"]
    assert len(left_with) == 1 and isinstance(left_with[0], LockLost)
    assert left_with[0].reason == LockLost.CLOSED
    assert len(own_wait) == 1 and isinstance(own_wait[0], LockNotAcquired)
    assert holds(r, theirs)
    # The manager goes on, in a new session.
    with locks.lock("again", ttl=30) as again:
        assert again.session is not None and again.session != acquired[0].session
        assert holds(r, again)


def test_asyncio_close_and_async_with(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        async with fencelock.asyncio.Locks(client) as locks:
            reported: list[Lease] = []
            outcome: list[BaseException] = []

            async def block() -> None:
                try:
                    async with locks.lock("ac", ttl=30, on_lost=reported.append):
                        await asyncio.sleep(5)
                except BaseException as error:
                    outcome.append(error)

            task = asyncio.ensure_future(block())
            await asyncio.sleep(0.1)
            assert admin.exists("lock:ac") == 1
            await locks.close()  # the alias of aclose
            assert admin.exists("lock:ac") == 0
            assert len(reported) == 1
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            lease = await locks.acquire("ac2", ttl=30, session=True)
        assert admin.exists("lock:ac2") == 0 and lease.released
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_a_cancelled_aclose_still_closes(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        leases = [await locks.acquire(f"k{i}", ttl=30, session=True) for i in range(5)]
        closing = asyncio.ensure_future(locks.aclose())
        await asyncio.sleep(0)
        closing.cancel()
        await asyncio.gather(closing, return_exceptions=True)
        await asyncio.sleep(0.1)
        assert all(lease.released for lease in leases)
        assert admin.exists(*(lease.key for lease in leases)) == 0
        await client.aclose()

    run(main())
    admin.close()


# ---------------------------------------------------------------------------------
# Lock-delay
# ---------------------------------------------------------------------------------


def test_lock_delay_of_the_manager_and_per_lock(server: Server, r: redis.Redis) -> None:
    monitor = Monitor(server.port)
    delayed, plain, other = Locks(r, lock_delay=0.5), Locks(r), Locks(r)
    delayed.acquire("d", ttl=0.1)  # a lease of its own, not refreshed: runs out
    plain.acquire("p", ttl=0.1, lock_delay=0.4)  # per lock
    delayed.acquire("z", ttl=0.1, lock_delay=0)  # per lock overrides the manager's
    plain.acquire("n", ttl=0.1)  # none: the server's default (0)
    lines = monitor.stop()
    acquires = [line for line in lines if '"lock.acquire"' in line]
    assert sum('"lockdelay" "500"' in line for line in acquires) == 1
    assert sum('"lockdelay" "400"' in line for line in acquires) == 1
    assert sum('"lockdelay" "0"' in line for line in acquires) == 1
    assert sum('"lockdelay"' not in line for line in acquires) == 1
    time.sleep(0.15)
    for name, left in (("d", 0.5), ("p", 0.4)):
        info = other.info(name)
        assert info is not None and info["mode"] == "quarantined", name
        assert not info["held"] and 0 < (info["ttl_ms"] or 0) <= left * 1000
        with pytest.raises(LockNotAcquired):
            other.acquire(name, ttl=1)
    for name in ("z", "n"):
        other.acquire(name, ttl=1)
    start = time.monotonic()
    other.acquire("d", ttl=1, wait=2)  # queued; served as the quarantine ends
    assert 0.2 < time.monotonic() - start < 0.5
    r.delete("lock:p")  # an operator's DEL ends a quarantine
    other.acquire("p", ttl=1)


def test_lock_delay_zero_turns_off_the_servers_default(own_server: Server) -> None:
    client = own_server.client()
    client.config_set("fencelock.lock-delay", 400)
    locks, other = Locks(client), Locks(client)
    locks.acquire("default", ttl=0.1)
    locks.acquire("off", ttl=0.1, lock_delay=0)
    time.sleep(0.15)
    assert mode(client, "default") == "quarantined"
    other.acquire("off", ttl=1)
    with pytest.raises(LockNotAcquired):
        other.acquire("default", ttl=1)
    client.close()


def test_lock_delay_is_refused_by_a_server_without_it(own_server: Server) -> None:
    """A user who may not run the session commands sees the server as one without
    sessions (as an older module): locks keep a lease of their own, refreshed on its
    own, and ``lock_delay``, which such a server would not understand, is refused
    before anything is sent."""
    admin = own_server.client()
    admin.execute_command(
        "ACL", "SETUSER", "old", "on", ">pw", "~*", "+@all",
        "-lock.keepalive", "-lock.close", "-lock.held",
    )  # fmt: skip
    client = own_server.client(username="old", password="pw")
    locks = Locks(client)
    counts = Counts(admin)
    with locks.lock("x", ttl=0.3) as lease:
        time.sleep(0.5)
        assert lease.session is None and holds(admin, lease)
    assert counts["lock.refresh"] >= 3 and counts["lock.keepalive"] == 0
    with pytest.raises(fencelock.LockError, match="lock_delay needs"):
        locks.acquire("y", ttl=1, lock_delay=1)
    assert admin.exists("lock:y") == 0
    client.close()
    admin.close()


# ---------------------------------------------------------------------------------
# Leases of their own
# ---------------------------------------------------------------------------------


def test_session_false_keeps_the_refresh_per_lease(
    server: Server, r: redis.Redis
) -> None:
    monitor = Monitor(server.port)
    counts = Counts(r)
    locks = Locks(r, session=False)
    assert locks.session is False
    with contextlib.ExitStack() as stack:
        leases = [stack.enter_context(locks.lock(f"o{i}", ttl=0.3)) for i in range(5)]
        time.sleep(0.5)
        assert all(lease.session is None and holds(r, lease) for lease in leases)
    lines = monitor.stop()
    assert counts["lock.keepalive"] == 0 and counts["lock.refresh"] >= 5 * 3
    assert not [line for line in lines if '"session"' in line]


def test_options_that_need_a_lease_of_its_own(r: redis.Redis) -> None:
    """``session=False``, ``min_hold``, ``max_hold`` and ``auto_refresh=False`` give
    the lock a lease of its own, in a session manager too; a lease of the session
    cannot be held with them."""
    locks = Locks(r)
    counts = Counts(r)
    with locks.lock("own", ttl=0.3, session=False) as own:
        time.sleep(0.25)
    assert own.session is None and counts["lock.refresh"] >= 1
    with locks.lock("cron", ttl=10, min_hold=0.5) as cron:
        pass
    assert cron.session is None and 0 < r.pttl("lock:cron") <= 500
    with locks.lock("short", ttl=0.2, auto_refresh=False, lost_ok=True) as short:
        time.sleep(0.25)
    assert short.session is None and short.lost_reason == LockLost.DEADLINE
    with locks.lock("bounded", ttl=10, max_hold=1) as bounded:
        assert bounded.session is None
    assert locks.acquire("plain", ttl=10).session is None, "acquire: its own by default"
    lease = locks.acquire("in-session", ttl=10, session=True)
    assert lease.session is not None
    with (
        pytest.raises(ValueError, match="lease of its own"),
        locks.holding(lease, min_hold=1),
    ):
        pytest.fail("held a session's lease with min_hold")
    locks.release(lease)
    assert r.exists("lock:in-session") == 0


def test_a_token_held_in_another_session_is_refused(r: redis.Redis) -> None:
    first, second = Locks(r), Locks(r)
    lease = first.acquire("shared-token", ttl=30, token="worker-1", session=True)
    before = r.pttl("lock:shared-token")
    with pytest.raises(WrongSession) as refused:
        second.acquire("shared-token", ttl=60, token="worker-1", session=True)
    assert refused.value.lock_name == "lock:shared-token"
    assert isinstance(refused.value, fencelock.LockError)
    assert isinstance(refused.value, redis.ResponseError)
    assert "worker-1" not in str(refused.value)
    assert r.pttl("lock:shared-token") <= before, "not renewed"
    lock = fencelock.Lock(r, "lock:shared-token", timeout=30)
    with pytest.raises(WrongSession):  # outside any session
        lock.acquire(blocking=False, token="worker-1")
    assert holds(r, lease)
    # The same manager again: the idempotent re-acquire of its own holding.
    again = first.acquire("shared-token", ttl=30, token="worker-1", session=True)
    assert again.fence == lease.fence


# ---------------------------------------------------------------------------------
# Constructions
# ---------------------------------------------------------------------------------

SYNC_CONSTRUCTIONS: dict[str, Callable[[str], redis.Redis]] = {
    "from_url": lambda url: redis.Redis.from_url(url),
    "ConnectionPool": lambda url: redis.Redis(
        connection_pool=redis.ConnectionPool.from_url(url, max_connections=4)
    ),
    "BlockingConnectionPool": lambda url: redis.Redis(
        connection_pool=redis.BlockingConnectionPool.from_url(
            url, max_connections=2, timeout=5
        )
    ),
}
ASYNC_CONSTRUCTIONS: dict[str, Callable[[str], redis.asyncio.Redis]] = {
    "from_url": lambda url: redis.asyncio.Redis.from_url(url),
    "ConnectionPool": lambda url: redis.asyncio.Redis(
        connection_pool=redis.asyncio.ConnectionPool.from_url(url, max_connections=4)
    ),
    "BlockingConnectionPool": lambda url: redis.asyncio.Redis(
        connection_pool=redis.asyncio.BlockingConnectionPool.from_url(
            url, max_connections=2, timeout=5
        )
    ),
}


@pytest.mark.parametrize("construction", sorted(SYNC_CONSTRUCTIONS))
def test_sessions_through_each_construction(
    construction: str, url: str, r: redis.Redis
) -> None:
    client = SYNC_CONSTRUCTIONS[construction](url)
    counts = Counts(r)
    with Locks(client) as locks, contextlib.ExitStack() as stack:
        leases = [stack.enter_context(locks.lock(f"k{i}", ttl=0.3)) for i in range(5)]
        kept = locks.acquire("kept", ttl=0.3, session=True)
        time.sleep(0.7)
        assert not [lease for lease in [*leases, kept] if lease.lost.is_set()]
        assert holds(r, kept)
    assert counts["lock.keepalive"] >= 4 and counts["lock.refresh"] == 0
    assert counts["lock.close"] == 1 and kept.released
    assert r.exists("lock:kept", *(f"lock:k{i}" for i in range(5))) == 0
    client.close()
    client.connection_pool.disconnect()  # a pool given to a client is not its own


@pytest.mark.parametrize("construction", sorted(ASYNC_CONSTRUCTIONS))
def test_asyncio_sessions_through_each_construction(
    construction: str, url: str, r: redis.Redis
) -> None:
    async def main() -> None:
        client = ASYNC_CONSTRUCTIONS[construction](url)
        counts = Counts(r)
        async with fencelock.asyncio.Locks(client) as locks:  # noqa: SIM117
            async with contextlib.AsyncExitStack() as stack:
                leases = [
                    await stack.enter_async_context(locks.lock(f"k{i}", ttl=0.3))
                    for i in range(5)
                ]
                kept = await locks.acquire("kept", ttl=0.3, session=True)
                await asyncio.sleep(0.7)
                assert not [lease for lease in [*leases, kept] if lease.lost.is_set()]
        assert counts["lock.keepalive"] >= 4 and counts["lock.refresh"] == 0
        assert counts["lock.close"] == 1 and kept.released
        assert r.exists("lock:kept", *(f"lock:k{i}" for i in range(5))) == 0
        await client.aclose()
        await client.connection_pool.disconnect()

    run(main())


# ---------------------------------------------------------------------------------
# asyncio cancellation
# ---------------------------------------------------------------------------------


def test_asyncio_cancellation_leaves_no_holding_and_no_heartbeat(url: str) -> None:
    """Tasks cancelled at random moments of their acquire (waiting in the queue, or
    just granted) and of their block: afterwards the session holds nothing on the
    server, nothing is watched, and no keepalive is sent any more."""
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url, socket_timeout=5)
        locks = fencelock.asyncio.Locks(client)
        other = fencelock.asyncio.Locks(client)
        sessions = set()
        for attempt in range(30):
            busy = await other.acquire(f"busy{attempt}", ttl=0.05)

            async def work(attempt: int = attempt) -> None:
                async with locks.lock(f"free{attempt}", ttl=0.03) as lease:
                    sessions.add(lease.session)
                    async with locks.lock(f"busy{attempt}", ttl=0.03, wait=5):
                        await asyncio.sleep(10)

            task = asyncio.ensure_future(work())
            await asyncio.sleep(0.005 * (attempt % 12))
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=1)
            assert done, f"run {attempt} hung after its cancellation"
            await other.release(busy)
        await asyncio.sleep(0.05)
        assert all(held_by(admin, name) == [] for name in sessions if name)
        assert len(locks._refresher._schedule) == 0
        counts = Counts(admin)
        await asyncio.sleep(0.2)
        assert counts["lock.keepalive"] == 0, "no heartbeat left"
        await client.aclose()

    run(main())
    admin.close()


def test_asyncio_a_cancelled_waiter_of_a_session_leaves_nothing(url: str) -> None:
    admin = redis.Redis.from_url(url)

    async def main() -> None:
        client = async_client(url)
        holder = fencelock.asyncio.Locks(client)
        locks = fencelock.asyncio.Locks(client)
        busy = await holder.acquire("queued", ttl=30)
        waiter = asyncio.ensure_future(
            locks.acquire("queued", ttl=30, wait=5, session=True)
        )
        await asyncio.sleep(0.1)
        info = fencelock.lock_info(admin, "lock:queued")
        assert info is not None and info["waiters"] == 1
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await holder.release(busy)
        await asyncio.sleep(0.05)
        assert admin.exists("lock:queued") == 0, "granted to nobody"
        assert len(locks._refresher._schedule) == 0
        await client.aclose()

    run(main())
    admin.close()


# ---------------------------------------------------------------------------------
# Cluster: one keepalive per node, and a holding moved by a migration
# ---------------------------------------------------------------------------------


def node_for(cluster: list[Server], client: Any, key: str) -> Server:
    node = client.get_node_from_key(key)
    return next(server for server in cluster if server.port == node.port)


def node_id(server: Server) -> str:
    with server.client(decode_responses=True) as client:
        return str(client.execute_command("CLUSTER", "MYID"))


def move_slot(cluster: list[Server], key: str, source: Server, target: Server) -> None:
    """A live slot migration of ``key``'s slot (with ``key``) from source to target."""
    with source.client() as src, target.client() as dst:
        slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
        src.execute_command(
            "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", key
        )
        for node in cluster:
            with node.client() as each:
                each.execute_command(
                    "CLUSTER", "SETSLOT", slot, "NODE", node_id(target)
                )


def test_cluster_one_keepalive_per_node_and_a_migrated_holding(
    cluster: list[Server],
) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    locks = Locks(client, prefix="")
    names = [f"spread{i}" for i in range(30)]
    by_node = {server.port: 0 for server in cluster}
    for name in names:
        by_node[node_for(cluster, client, name).port] += 1
    assert all(by_node.values()), "the keys are on every node"
    admins = {server.port: server.client() for server in cluster}
    moving = "{moving}"
    source = node_for(cluster, client, moving)
    target = next(server for server in cluster if server is not source)
    try:
        with contextlib.ExitStack() as stack:
            leases = [stack.enter_context(locks.lock(n, ttl=0.3)) for n in names]
            moved = stack.enter_context(locks.lock(moving, ttl=0.3))
            counts = {port: Counts(admin) for port, admin in admins.items()}
            time.sleep(0.6)
            for port, count in counts.items():
                assert 3 <= count["lock.keepalive"] <= 0.6 / 0.1 + 2, port
                assert count["lock.refresh"] == 0
            move_slot(cluster, moving, source, target)
            time.sleep(0.9)  # three ttls on the new node
            assert not moved.lost.is_set()
            assert not [lease for lease in leases if lease.lost.is_set()]
            on_target = held_by(admins[target.port], moved.session or "")
            assert moving.encode() in [entry[0] for entry in on_target]
            assert 0 < admins[target.port].pttl(moving) <= 300
        assert held_by(admins[target.port], moved.session or "") == []
    finally:
        move_slot(cluster, moving, target, source)
        for admin in admins.values():
            admin.close()
        client.close()


def test_cluster_asyncio_sessions(cluster: list[Server]) -> None:
    admins = [server.client() for server in cluster]

    async def main() -> None:
        client = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=cluster[0].port
        )
        counts = [Counts(admin) for admin in admins]
        async with fencelock.asyncio.Locks(client) as locks:
            async with contextlib.AsyncExitStack() as stack:
                leases = [
                    await stack.enter_async_context(locks.lock(f"a{i}", ttl=0.3))
                    for i in range(20)
                ]
                await asyncio.sleep(0.6)
                assert not [lease for lease in leases if lease.lost.is_set()]
            kept = await locks.acquire("{x}", ttl=0.3, session=True)
        assert kept.released
        assert sum(count["lock.keepalive"] for count in counts) >= 3 * 3
        assert sum(count["lock.refresh"] for count in counts) == 0
        assert sum(count["lock.close"] for count in counts) >= 1
        await client.aclose()

    run(main())
    for admin in admins:
        admin.close()
