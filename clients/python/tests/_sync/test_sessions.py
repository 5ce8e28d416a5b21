# Generated from tests/_async/test_sessions.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Sessions (``Locks(client, session=True)``, the default) on both sides: one
``LOCK.KEEPALIVE`` per server and interval keeps every lock of a manager's blocks
alive, the leases of a session are lost together, leaving the manager's ``async
with`` releases its session, ``lock_delay`` quarantines a lock whose holder stopped,
``session=False`` and the options that need it keep the refresh per lease, a token
held in another session is refused, and a wait longer than the ttl keeps both the
grant and the session; through each construction of a client. What the server ran
is read from ``INFO commandstats`` and ``MONITOR``. What one side does its own way
(processes killed or paused, threads or tasks waiting on each other around
``close()``, cancellation) is tests/test_sessions.py. On Redis Cluster: one
keepalive per node, a holding moved by a live slot migration, the sessions closed on
every node."""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Any, Callable

import pytest
import redis
import redis.cluster
from monitor import Monitor
from servers import Server

import fencelock
from fencelock import Lease, LockLost, LockNotAcquired, Locks, WrongSession

from .helpers import in_thread, set_within, sleep, until

NAMES = ("lock.keepalive", "lock.refresh", "lock.held", "lock.close")


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``)."""
    stats = (client.info("commandstats")).get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def counted(client: redis.Redis) -> dict[str, int]:
    """The session commands and refreshes the server ran so far."""
    return {name: calls(client, name) for name in NAMES}


def since(client: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    """The session commands and refreshes the server ran since ``before``."""
    now = counted(client)
    return {name: now[name] - before[name] for name in NAMES}


def held_by(client: redis.Redis, session: str) -> list[Any]:
    return list(client.execute_command("LOCK.HELD", session))


def holds(client: redis.Redis, lease: Lease) -> bool:
    return bool(client.execute_command("LOCK.FENCE", lease.key, lease.token))


def kept_alive_after_their_grants(leases: list[Lease]) -> None:
    """Waits until every lease of ``leases`` (just granted) was confirmed by a
    keepalive sent after the last grant. A keepalive sent while the acquires went on
    counts a holding granted but not yet in the manager's list (the server's count
    is one more than the list) and asks ``LOCK.HELD`` which ones it keeps; on a busy
    machine the acquires outlast the heartbeat interval and that ``LOCK.HELD`` may
    leave after the test reads its counts. From here on the manager's list and the
    server's holdings agree, so what is counted is the steady state alone."""
    granted = time.monotonic()

    def confirmed() -> bool:
        # A confirmation sets the deadline to its keepalive's send time + the ttl
        # (less a grain of the server's clock): past this, it was sent after
        # ``granted``, so every keepalive before it has been answered.
        return all(lease.deadline > granted + lease.ttl for lease in leases)

    until(confirmed, 10 * max(lease.ttl for lease in leases), "a keepalive")


MANY = 200
TTL = 0.6  # the heartbeat every 0.2 s: a busy machine may stall a process 0.3 s


def test_one_keepalive_per_interval_keeps_200_locks(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(locks.lock(f"many:{i}", ttl=TTL)) for i in range(MANY)
        ]
        session = leases[0].session
        assert session is not None and {lease.session for lease in leases} == {session}
        kept_alive_after_their_grants(leases)
        before = counted(r)
        start = time.monotonic()
        sleep(5 * TTL)
        elapsed = time.monotonic() - start
        counts = since(r, before)
        assert counts["lock.refresh"] == 0, "no lease refreshed on its own"
        assert counts["lock.held"] == 0
        sent = counts["lock.keepalive"]
        assert 5 <= sent <= elapsed / (TTL / 3) + 2, "one keepalive per interval"
        assert len(held_by(r, session)) == MANY
        assert not [lease for lease in leases if lease.lost.is_set()]
        # Each confirmed keepalive moved every deadline.
        assert min(lease.time_left for lease in leases) > TTL / 3
    assert r.exists(*(f"lock:many:{i}" for i in range(MANY))) == 0
    assert held_by(r, session) == []


def test_leaving_the_managers_with_closes_it(r: redis.Redis) -> None:
    with Locks(r) as locks:
        lease = locks.acquire("ctx", ttl=30, session=True)
        with locks.lock("ctx-block", ttl=30):
            pass
        assert holds(r, lease)
    assert r.exists("lock:ctx") == 0 and lease.released
    # The block's own exception is not hidden by the close.
    with pytest.raises(RuntimeError):
        with Locks(r) as locks:
            locks.acquire("ctx", ttl=30, session=True)
            raise RuntimeError("job failed")
    assert r.exists("lock:ctx") == 0


def _held_elsewhere(client: redis.Redis, key: str, seconds: float) -> None:
    """Another holder takes ``key`` for ``seconds`` (then its lease runs out)."""
    client.execute_command("LOCK.ACQUIRE", key, int(seconds * 1000), "TOKEN", "other")


def test_a_wait_longer_than_the_ttl_keeps_the_grant_and_the_session(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    _held_elsewhere(r, "lock:long-wait:b", 1.5)
    with (
        locks.lock("long-wait:a", ttl=1.0) as a,
        locks.lock("long-wait:b", ttl=1.0, wait=None) as b,
    ):
        # Granted about 1.5 s after it was asked for, with a ttl of 1 s.
        assert not b.lost.is_set(), b.lost_reason
        assert b.time_left > 0.5
        sleep(1.5)
        assert not b.lost.is_set() and not a.lost.is_set()
        assert holds(r, b) and holds(r, a)
    locks.close()


def mode(client: redis.Redis, name: str) -> Any:
    info = fencelock.lock_info(client, f"lock:{name}")
    return None if info is None else info["mode"]


def test_locks_of_different_ttls_keep_their_own(r: redis.Redis) -> None:
    """Each keepalive gives a lock its own ttl again: locks of two ttls are two
    sessions, one keepalive each per interval."""
    locks = Locks(r)
    with (
        locks.lock("short", ttl=0.3) as short,
        locks.lock("long", ttl=30) as long,
    ):
        assert short.session != long.session
        sleep(0.5)
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
        sleep(0.5)  # the keepalives of b (due after 0.1 s) moved a too
        assert 300 < r.pttl("lock:a") <= 600
        assert 300 < r.pttl("lock:b") <= 600
        assert a.time_left <= 0.6 and not a.lost.is_set() and not b.lost.is_set()


def test_a_stopped_server_loses_the_session_at_its_deadline(
    own_server: Server,
) -> None:
    client = redis.Redis(port=own_server.port, socket_timeout=5)
    locks = Locks(client)
    reported: list[tuple[Lease, float]] = []

    def on_lost(lease: Lease) -> None:
        reported.append((lease, time.monotonic()))

    def all_reported() -> bool:
        return len(reported) == 50

    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(
                locks.lock(f"s{i}", ttl=0.6, on_lost=on_lost, lost_ok=True)
            )
            for i in range(50)
        ]
        sleep(0.7)  # past the first ttl: the keepalives hold them
        own_server.process.send_signal(signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            until(all_reported, 3, "every lease reported lost")
        finally:
            own_server.process.send_signal(signal.SIGCONT)
        times = [at for _, at in reported]
        assert max(times) - min(times) < 0.1, "reported together"
        assert min(times) - stopped <= 0.6 + 0.1, "at the session's deadline"
        assert {lease.lost_reason for lease in leases} == {LockLost.DEADLINE}
        with pytest.raises(LockLost):
            leases[7].ensure_held()
    client.close()


def test_a_keepalive_that_finds_nothing_loses_every_lease(
    r: redis.Redis,
) -> None:
    """Someone deleted every key (a restart without persistence, a failover would do
    the same): the next keepalive answers 0, and all are lost at once."""
    locks = Locks(r)
    reported: list[Lease] = []

    def all_reported() -> bool:
        return len(reported) == 20

    with contextlib.ExitStack() as stack:
        leases = [
            stack.enter_context(
                locks.lock(f"gone{i}", ttl=0.6, on_lost=reported.append, lost_ok=True)
            )
            for i in range(20)
        ]
        r.delete(*(lease.key for lease in leases))
        deleted = time.monotonic()
        until(all_reported, 2, "all reported")
        assert time.monotonic() - deleted < 0.2 + 0.15, "within one interval"
        assert {lease.lost_reason for lease in leases} == {LockLost.GONE}
        # The manager's next locks are in a new session.
        with locks.lock("after", ttl=0.6) as after:
            assert after.session not in {lease.session for lease in leases}


def test_fewer_than_held_loses_only_the_missing_ones(
    any_r: redis.Redis,
) -> None:
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
        kept_alive_after_their_grants(leases)
        before = counted(r)
        r.delete(leases[3].key)
        assert set_within(leases[3].lost, 1)
        assert leases[3].lost_reason == LockLost.GONE
        sleep(0.3)
        assert (since(r, before))["lock.held"] == 1
        kept = [lease for i, lease in enumerate(leases) if i != 3]
        assert not [lease for lease in kept if lease.lost.is_set()]
        assert all([holds(r, lease) for lease in kept])
        assert len(held_by(r, kept[0].session or "")) == 9


# ---------------------------------------------------------------------------------
# Lock-delay
# ---------------------------------------------------------------------------------


def test_lock_delay_of_the_manager_and_per_lock(server: Server, r: redis.Redis) -> None:
    monitor = Monitor(server.port)
    delayed, plain, other = Locks(r, lock_delay=0.5), Locks(r), Locks(r)
    delayed.acquire("d", ttl=0.1)  # a lease of its own, not refreshed
    plain.acquire("p", ttl=0.1, lock_delay=0.4)  # per lock
    delayed.acquire("z", ttl=0.1, lock_delay=0)  # overrides the manager's
    plain.acquire("n", ttl=0.1)  # none: the server's default (0)
    lines = monitor.stop()
    acquires = [line for line in lines if '"lock.acquire"' in line]
    assert sum('"lockdelay" "500"' in line for line in acquires) == 1
    assert sum('"lockdelay" "400"' in line for line in acquires) == 1
    assert sum('"lockdelay" "0"' in line for line in acquires) == 1
    assert sum('"lockdelay"' not in line for line in acquires) == 1
    sleep(0.15)
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


def test_lock_delay_zero_turns_off_the_servers_default(
    own_server: Server,
) -> None:
    client = redis.Redis(port=own_server.port)
    client.config_set("fencelock.lock-delay", 400)
    locks, other = Locks(client), Locks(client)
    locks.acquire("default", ttl=0.1)
    locks.acquire("off", ttl=0.1, lock_delay=0)
    sleep(0.15)
    assert mode(client, "default") == "quarantined"
    other.acquire("off", ttl=1)
    with pytest.raises(LockNotAcquired):
        other.acquire("default", ttl=1)
    client.close()


def test_lock_delay_is_refused_by_a_server_without_it(
    own_server: Server,
) -> None:
    """A user who may not run the session commands sees the server as one without
    sessions (as an older module): locks keep a lease of their own, refreshed on its
    own, and ``lock_delay``, which such a server would not understand, is refused
    before anything is sent."""
    admin = redis.Redis(port=own_server.port)
    admin.execute_command(
        "ACL", "SETUSER", "old", "on", ">pw", "~*", "+@all",
        "-lock.keepalive", "-lock.close", "-lock.held",
    )  # fmt: skip
    client = redis.Redis(port=own_server.port, username="old", password="pw")
    locks = Locks(client)
    before = counted(admin)
    with locks.lock("x", ttl=0.3) as lease:
        sleep(0.5)
        assert lease.session is None and holds(admin, lease)
    counts = since(admin, before)
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
    before = counted(r)
    locks = Locks(r, session=False)
    assert locks.session is False
    with contextlib.ExitStack() as stack:
        leases = [stack.enter_context(locks.lock(f"o{i}", ttl=0.3)) for i in range(5)]
        sleep(0.5)
        assert all(lease.session is None for lease in leases)
        assert all([holds(r, lease) for lease in leases])
    lines = monitor.stop()
    counts = since(r, before)
    assert counts["lock.keepalive"] == 0 and counts["lock.refresh"] >= 5 * 3
    assert not [line for line in lines if '"session"' in line]


def test_options_that_need_a_lease_of_its_own(r: redis.Redis) -> None:
    """``session=False``, ``min_hold``, ``max_hold`` and ``auto_refresh=False`` give
    the lock a lease of its own, in a session manager too; a lease of the session
    cannot be held with them."""
    locks = Locks(r)
    before = counted(r)
    with locks.lock("own", ttl=0.3, session=False) as own:
        sleep(0.25)
    assert own.session is None and (since(r, before))["lock.refresh"] >= 1
    with locks.lock("cron", ttl=10, min_hold=0.5) as cron:
        pass
    assert cron.session is None and 0 < r.pttl("lock:cron") <= 500
    with locks.lock("short", ttl=0.2, auto_refresh=False, lost_ok=True) as short:
        sleep(0.25)
    assert short.session is None and short.lost_reason == LockLost.DEADLINE
    with locks.lock("bounded", ttl=10, max_hold=1) as bounded:
        assert bounded.session is None
    plain = locks.acquire("plain", ttl=10)
    assert plain.session is None, "acquire: its own by default"
    lease = locks.acquire("in-session", ttl=10, session=True)
    assert lease.session is not None
    with pytest.raises(ValueError, match="lease of its own"):
        with locks.holding(lease, min_hold=1):
            pytest.fail("held a session's lease with min_hold")
    locks.release(lease)
    assert r.exists("lock:in-session") == 0


def test_a_token_held_in_another_session_is_refused(
    r: redis.Redis,
) -> None:
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

CONSTRUCTIONS: dict[str, Callable[[str], redis.Redis]] = {
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


@pytest.mark.parametrize("construction", sorted(CONSTRUCTIONS))
def test_sessions_through_each_construction(
    construction: str, server: Server, r: redis.Redis
) -> None:
    client = CONSTRUCTIONS[construction](server.url)
    before = counted(r)
    with Locks(client) as locks, contextlib.ExitStack() as stack:
        leases = [stack.enter_context(locks.lock(f"k{i}", ttl=0.3)) for i in range(5)]
        kept = locks.acquire("kept", ttl=0.3, session=True)
        sleep(0.7)
        assert not [lease for lease in [*leases, kept] if lease.lost.is_set()]
        assert holds(r, kept)
    counts = since(r, before)
    assert counts["lock.keepalive"] >= 4 and counts["lock.refresh"] == 0
    assert counts["lock.close"] == 1 and kept.released
    assert r.exists("lock:kept", *(f"lock:k{i}" for i in range(5))) == 0
    client.close()
    # A pool given to a client is not its own.
    client.connection_pool.disconnect()


# ---------------------------------------------------------------------------------
# Cluster: one keepalive per node, a holding moved by a migration, the sessions closed
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
    client.ping()  # the asyncio client learns the slots on its first command
    locks = Locks(client, prefix="")
    names = [f"spread{i}" for i in range(30)]
    by_node = {server.port: 0 for server in cluster}
    for name in names:
        by_node[node_for(cluster, client, name).port] += 1
    assert all(by_node.values()), "the keys are on every node"
    admins = {server.port: redis.Redis(port=server.port) for server in cluster}
    moving = "{moving}"
    source = node_for(cluster, client, moving)
    target = next(server for server in cluster if server is not source)
    try:
        with contextlib.ExitStack() as stack:
            leases = [stack.enter_context(locks.lock(n, ttl=0.3)) for n in names]
            moved = stack.enter_context(locks.lock(moving, ttl=0.3))
            before = {port: counted(admin) for port, admin in admins.items()}
            sleep(0.6)
            for port, admin in admins.items():
                count = since(admin, before[port])
                assert 3 <= count["lock.keepalive"] <= 0.6 / 0.1 + 2, port
                assert count["lock.refresh"] == 0
            # In a thread of its own: the refresher goes on meanwhile.
            in_thread(move_slot, cluster, moving, source, target)
            sleep(0.9)  # three ttls on the new node
            assert not moved.lost.is_set()
            assert not [lease for lease in leases if lease.lost.is_set()]
            on_target = held_by(admins[target.port], moved.session or "")
            assert moving.encode() in [entry[0] for entry in on_target]
            assert 0 < admins[target.port].pttl(moving) <= 300
        assert held_by(admins[target.port], moved.session or "") == []
    finally:
        in_thread(move_slot, cluster, moving, target, source)
        for admin in admins.values():
            admin.close()
        client.close()


def test_cluster_sessions(cluster: list[Server]) -> None:
    """Leaving the manager's block closes its session on every node."""
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    admins = [redis.Redis(port=server.port) for server in cluster]
    before = [counted(admin) for admin in admins]
    with Locks(client) as locks:
        with contextlib.ExitStack() as stack:
            leases = [
                stack.enter_context(locks.lock(f"a{i}", ttl=0.3)) for i in range(20)
            ]
            sleep(0.6)
            assert not [lease for lease in leases if lease.lost.is_set()]
        kept = locks.acquire("{x}", ttl=0.3, session=True)
    assert kept.released
    counts = [since(admin, was) for admin, was in zip(admins, before)]
    assert sum(count["lock.keepalive"] for count in counts) >= 3 * 3
    assert sum(count["lock.refresh"] for count in counts) == 0
    assert sum(count["lock.close"] for count in counts) >= 1
    for admin in admins:
        admin.close()
    client.close()
