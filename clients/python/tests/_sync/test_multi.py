# Generated from tests/_async/test_multi.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Several locks at once (``LOCK.ACQUIREALL``): ``MultiLock`` (the drop-in
shape) and ``Locks.lock_all`` (the manager's leases), against a real server: every key
or none, fences in the order of the keys, a release per key, the manager's session or
a refresh per key keeping them, a long wait confirmed by a refresh, ``Deadlock`` for
two owners each holding what the other asks for, the constructions of a client, and
Redis Cluster (routed by the first key, ``CROSSSLOT`` for keys of several slots)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster
from redis.exceptions import ClusterCrossSlotError, LockError, LockNotOwnedError
from servers import Server
from setups import Node, stopping

import fencelock
from fencelock import (
    Deadlock,
    LockLost,
    LockNotAcquired,
    Locks,
    ManagedMultiLock,
    MultiLock,
    WrongMode,
)

from .helpers import join, later, sleep, spawn, until


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``)."""
    stats = (client.info("commandstats")).get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def fence_of(client: Any, key: str, token: Any) -> Any:
    return client.execute_command("LOCK.FENCE", key, token)


def waiters(client: Any, key: str) -> int:
    info = fencelock.lock_info(client, key)
    return 0 if info is None else info["waiters"]


# ---------------------------------------------------------------------------------
# Every key or none
# ---------------------------------------------------------------------------------


def test_one_key_held_grants_nothing(r: redis.Redis) -> None:
    other = fencelock.Lock(r, "b", timeout=30)
    assert other.acquire(blocking=False)
    multi = MultiLock(r, ["a", "b", "c"], timeout=30)
    assert not multi.acquire(blocking=False)
    assert r.exists("a", "c") == 0, "nothing granted while one key is held"
    assert multi.fences == [] and not multi.owned()
    start = time.monotonic()
    assert not multi.acquire(blocking_timeout=0.2)
    assert 0.2 <= time.monotonic() - start < 1
    assert r.exists("a", "c") == 0
    assert waiters(r, "b") == 0, "a wait that ended leaves no place in the queue"
    other.release()
    assert multi.acquire(blocking=False)
    assert multi.owned() and multi.locked()
    multi.release()
    assert r.exists("a", "b", "c") == 0 and not multi.locked()


def test_lock_all_one_key_held_grants_nothing(r: redis.Redis) -> None:
    other = Locks(r)
    locks = Locks(r)
    with other.lock("b", ttl=30):
        busy = locks.lock_all(["a", "b"], ttl=30, blocking=False)
        with pytest.raises(LockNotAcquired):
            with busy:
                pass
        held = locks.lock_all(["a", "b"], ttl=30, blocking_timeout=0.2)
        assert held.acquire() is False
        assert held.leases == [] and held.fences == []
        assert r.exists("lock:a") == 0
        # ``wait`` as ``lock`` spells it: 0 one try, seconds a bounded wait.
        with pytest.raises(LockNotAcquired):
            with locks.lock_all(["a", "b"], ttl=30, wait=0):
                pass
        start = time.monotonic()
        bounded = locks.lock_all(["a", "b"], ttl=30, wait=0.2)
        with pytest.raises(LockNotAcquired):
            with bounded:
                pass
        assert 0.2 <= time.monotonic() - start < 1
    assert len(locks._refresher._schedule) == 0


def test_a_waiter_is_granted_every_key_once_all_are_free(
    r: redis.Redis,
) -> None:
    first = fencelock.Lock(r, "a", timeout=30, thread_local=False)
    second = fencelock.Lock(r, "b", timeout=30, thread_local=False)
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    multi = MultiLock(r, ["a", "b"], timeout=30, blocking_timeout=5, thread_local=False)
    task, outcome = spawn(multi.acquire)

    def queued() -> bool:
        return waiters(r, "a") == 1 and waiters(r, "b") == 1

    until(queued, 5, "queued")
    first.release()
    sleep(0.2)
    assert "result" not in outcome, "not granted while one key is still held"
    assert r.exists("a") == 0, "the free key stays free for the waiter at its head"
    assert not fencelock.Lock(r, "a", timeout=30).acquire(blocking=False)
    second.release()
    join(task, 5)
    assert outcome == {"result": True}
    assert first.fence is not None and second.fence is not None
    assert min(multi.fences) > max(first.fence, second.fence)
    multi.release()


def test_fences_in_the_order_of_the_keys(r: redis.Redis) -> None:
    names = ["z", "m", "a"]
    multi = MultiLock(r, names, timeout=30)
    assert multi.acquire(token="mine")
    assert len(multi.fences) == 3
    assert [fence_of(r, name, "mine") for name in names] == multi.fences
    earlier = multi.fences
    multi.release()
    assert multi.fences == earlier, "kept after the release, as Lock.fence is"
    assert multi.acquire()
    assert min(multi.fences) > max(earlier), "a later grant has larger fences"
    multi.release()

    locks = Locks(r)
    with locks.lock_all(["z", "m", "a"], ttl=30) as held:
        assert held.fences == [lease.fence for lease in held.leases]
        assert [lease.key for lease in held.leases] == ["lock:z", "lock:m", "lock:a"]
        for lease in held.leases:
            assert fence_of(r, str(lease.key), lease.token) == lease.fence
            assert lease.token == held.leases[0].token, "one token for every key"


def test_release_is_one_release_per_key(r: redis.Redis) -> None:
    multi = MultiLock(r, ["a", "b", "c"], timeout=30)
    assert multi.acquire(token="t")
    before = calls(r, "lock.release")
    multi.release()
    assert calls(r, "lock.release") - before == 3
    assert r.exists("a", "b", "c") == 0

    # Each key is a holding of its own: one released alone leaves the others held.
    assert multi.acquire(token="t")
    assert r.execute_command("LOCK.RELEASE", "b", "t") == 1
    assert r.exists("a", "c") == 2 and r.exists("b") == 0
    assert not multi.owned()
    with pytest.raises(LockNotOwnedError, match="'b'"):
        multi.release()
    assert r.exists("a", "b", "c") == 0, "the others are released all the same"
    with pytest.raises(LockError, match="not owned or is already unlocked"):
        multi.release()


def test_lock_all_releases_each_key_on_leaving(r: redis.Redis) -> None:
    locks = Locks(r)
    before = calls(r, "lock.release")
    with locks.lock_all(["a", "b"], ttl=30) as held:
        assert r.exists("lock:a", "lock:b") == 2
    assert calls(r, "lock.release") - before == 2
    assert r.exists("lock:a", "lock:b") == 0
    assert len(held.leases) == 2 and all(lease.released for lease in held.leases)


def test_extend_and_reacquire_refresh_each_key(r: redis.Redis) -> None:
    multi = MultiLock(r, ["a", "b"], timeout=10)
    with pytest.raises(LockError, match="Cannot extend an unlocked lock"):
        multi.extend(10)
    assert multi.acquire()
    assert multi.extend(10)
    assert all([16_000 < r.pttl(key) <= 20_000 for key in ("a", "b")])
    assert multi.extend(5, replace_ttl=True)
    assert all([4_000 < r.pttl(key) <= 5_000 for key in ("a", "b")])
    assert multi.reacquire()
    assert all([8_000 < r.pttl(key) <= 10_000 for key in ("a", "b")])
    r.delete("b")
    with pytest.raises(LockNotOwnedError, match="Cannot extend a lock"):
        multi.extend(10)
    with pytest.raises(LockNotOwnedError):
        multi.release()


def test_without_a_timeout_every_key_is_permanent(r: redis.Redis) -> None:
    multi = MultiLock(r, ["a", "b"])
    assert multi.acquire()
    assert r.pttl("a") == -1 and r.pttl("b") == -1
    with pytest.raises(LockError, match="no timeout"):
        multi.extend(1)
    multi.release()
    assert r.exists("a", "b") == 0


def test_shared_holders_hold_every_key_together(r: redis.Redis) -> None:
    readers = [MultiLock(r, ["a", "b"], timeout=30, shared=True) for _ in range(2)]
    assert all([reader.acquire(blocking=False) for reader in readers])
    writer = MultiLock(r, ["b", "c"], timeout=30)
    assert not writer.acquire(blocking=False)
    assert r.exists("c") == 0
    for reader in readers:
        reader.release()
    assert writer.acquire(blocking=False, token="w")
    # A reader is busy while a writer holds a key; the writer's own token asking
    # for a reader's holding is refused, naming the key.
    assert not MultiLock(r, ["c"], timeout=30, shared=True).acquire(blocking=False)
    with pytest.raises(WrongMode) as refused:
        MultiLock(r, ["a", "c"], timeout=30, shared=True).acquire(
            blocking=False, token="w"
        )
    assert refused.value.key == "c" and refused.value.mode == "exclusive"
    assert r.exists("a") == 0
    writer.release()
    with pytest.raises(ValueError, match="needs a timeout"):
        MultiLock(r, ["a"], shared=True)

    locks = Locks(r)
    one = locks.lock_all(["a", "b"], ttl=30, shared=True)
    two = locks.lock_all(["a", "b"], ttl=30, shared=True)
    with one, two:
        assert [lease.mode for lease in one.leases + two.leases] == ["shared"] * 4
        info = fencelock.lock_info(r, "lock:a")
        assert info is not None and info["holders"] == 2


def test_the_names_are_checked_before_anything_is_sent(
    r: redis.Redis,
) -> None:
    with pytest.raises(ValueError, match="at least one"):
        MultiLock(r, [])
    with pytest.raises(ValueError, match="duplicate"):
        MultiLock(r, ["a", "b", b"a"])
    with pytest.raises(TypeError, match="list of names"):
        MultiLock(r, "ab")
    with pytest.raises(TypeError, match="list of names"):
        Locks(r).lock_all("ab", ttl=1)


# ---------------------------------------------------------------------------------
# The context manager
# ---------------------------------------------------------------------------------


def test_multilock_context_manager(r: redis.Redis) -> None:
    with MultiLock(r, ["a", "b"], timeout=30, blocking_timeout=0.2) as multi:
        assert multi.owned()
        assert r.exists("a", "b") == 2
        assert len(multi.fences) == 2
    assert r.exists("a", "b") == 0

    r.set("b", "a plain value")
    busy = MultiLock(r, ["a", "b"], timeout=30, blocking_timeout=0.2)
    with pytest.raises(LockError, match="Unable to acquire lock"):
        with busy:
            pass
    assert r.exists("a") == 0
    r.delete("b")

    with MultiLock(r, ["a", "b"], timeout=0.1, raise_on_release_error=False):
        sleep(0.15)
    short = MultiLock(r, ["a", "b"], timeout=0.1)
    with pytest.raises(LockNotOwnedError):
        with short:
            sleep(0.15)


def test_lock_all_context_manager_and_its_leases(r: redis.Redis) -> None:
    locks = Locks(r)
    held = locks.lock_all(["a", "b"], ttl=30)
    assert isinstance(held, ManagedMultiLock) and isinstance(held, MultiLock)
    with held:
        held.ensure_held()
        held.ensure_held(check=True)
        assert held.owned() and not held.lost
        assert 29 < held.time_left <= 30
    with pytest.raises(LockError, match="not held"):
        held.ensure_held()

    # Lost while held: leaving raises LockLost, after releasing the rest.
    with pytest.raises(LockLost) as lost:
        with locks.lock_all(["a", "b"], ttl=30) as held:
            r.delete("lock:b")
            with pytest.raises(LockLost):
                held.ensure_held(check=True)
    assert lost.value.reason == LockLost.GONE
    assert r.exists("lock:a") == 0
    with locks.lock_all(["a", "b"], ttl=30, lost_ok=True):
        r.delete("lock:a")

    # An exception of the block goes on unchanged, and everything is released.
    with pytest.raises(KeyError):
        with locks.lock_all(["a", "b"], ttl=30):
            raise KeyError("the job failed")
    assert r.exists("lock:a", "lock:b") == 0


def test_an_acquire_that_waits_for_its_own_thread_is_refused(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    with locks.lock("b", ttl=30):
        with pytest.raises(WrongMode, match="wait for itself"):
            locks.lock_all(["a", "b"], ttl=30, blocking_timeout=5).acquire()
        assert r.exists("lock:a") == 0
    with locks.lock_all(["a", "b"], ttl=30):
        with pytest.raises(WrongMode, match="wait for itself"):
            locks.acquire("a", ttl=30, wait=5)
        with pytest.raises(LockNotAcquired):
            locks.acquire("a", ttl=30)
        with pytest.raises(LockNotAcquired):
            with locks.lock_all(["b"], ttl=30, blocking=False):
                pass


# ---------------------------------------------------------------------------------
# Sessions, refreshes, long waits, close()
# ---------------------------------------------------------------------------------

TTL = 0.3


def test_lock_all_joins_the_managers_session(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("single", ttl=TTL) as single:
        with locks.lock_all(["a", "b", "c"], ttl=TTL) as held:
            session = single.session
            assert session is not None
            assert {lease.session for lease in held.leases} == {session}
            listed = r.execute_command("LOCK.HELD", session)
            assert sorted(entry[0] for entry in listed) == [
                b"lock:a",
                b"lock:b",
                b"lock:c",
                b"lock:single",
            ]
            refreshes = calls(r, "lock.refresh")
            keepalives = calls(r, "lock.keepalive")
            sleep(4 * TTL)
            assert calls(r, "lock.refresh") == refreshes, "no refresh per key"
            assert calls(r, "lock.keepalive") - keepalives >= 5
            assert r.exists("lock:a", "lock:b", "lock:c") == 3
            held.ensure_held()
        assert len(r.execute_command("LOCK.HELD", session)) == 1
    assert r.execute_command("LOCK.HELD", session) == []


def test_lock_all_without_a_session_refreshes_each_key(
    r: redis.Redis,
) -> None:
    locks = Locks(r, session=False)
    with locks.lock_all(["a", "b"], ttl=TTL) as held:
        assert {lease.session for lease in held.leases} == {None}
        refreshes = calls(r, "lock.refresh")
        keepalives = calls(r, "lock.keepalive")
        sleep(4 * TTL)
        # Every ttl/3, one LOCK.REFRESH per key.
        assert calls(r, "lock.refresh") - refreshes >= 2 * 6
        assert calls(r, "lock.keepalive") == keepalives
        assert r.exists("lock:a", "lock:b") == 2
        held.ensure_held()
    assert r.exists("lock:a", "lock:b") == 0

    with Locks(r).lock_all(["a", "b"], ttl=TTL, session=False) as alone:
        assert {lease.session for lease in alone.leases} == {None}
        sleep(2 * TTL)
        alone.ensure_held()


@pytest.mark.parametrize("wait", [1.0, 2.6], ids=["longer-than-a-third", "longer"])
def test_a_long_wait_is_confirmed_before_the_session_counts_it(
    r: redis.Redis, wait: float
) -> None:
    """A wait longer than ttl/3 (or than the ttl itself) ends in a grant whose lease
    started long after the acquire was sent: one refresh of every key gives the
    leases a deadline the client can count on. (A ttl of 2.4 s: the session's
    keepalive every 0.8 s outlasts a stall of a loaded machine.)"""
    ttl = 2.4
    holder = fencelock.Lock(r, "lock:b", timeout=30, thread_local=False)
    assert holder.acquire()
    later(wait, holder.release)
    locks = Locks(r)
    refreshes = calls(r, "lock.refresh")
    with locks.lock_all(["a", "b"], ttl=ttl, blocking_timeout=5) as held:
        assert calls(r, "lock.refresh") - refreshes == 2, "one refresh per key"
        assert held.time_left > ttl - 0.2
        held.ensure_held()
        sleep(ttl)  # the session keeps them from here on
        held.ensure_held(check=True)


def test_close_releases_the_keys_of_lock_all(r: redis.Redis) -> None:
    locks = Locks(r)
    held = locks.lock_all(["a", "b"], ttl=30)
    assert held.acquire()
    locks.close()
    assert r.exists("lock:a", "lock:b") == 0
    assert held.lost
    with pytest.raises(LockLost) as lost:
        held.release()
    assert lost.value.reason == LockLost.CLOSED


# ---------------------------------------------------------------------------------
# Deadlock
# ---------------------------------------------------------------------------------


def test_a_drop_in_wait_that_closes_a_cycle_raises_deadlock(
    r: redis.Redis,
) -> None:
    """Without sessions the owner is the token: token A holds a and waits for b and
    c, token B holds b and asks for a."""
    a = fencelock.Lock(r, "a", timeout=30, thread_local=False)
    b = MultiLock(r, ["b"], timeout=30, thread_local=False)
    assert a.acquire(token="A") and b.acquire(token="B")
    waiting = MultiLock(
        r, ["b", "c"], timeout=30, blocking_timeout=10, thread_local=False
    )
    task, outcome = spawn(lambda: waiting.acquire(token="A"))

    def queued() -> bool:
        return waiters(r, "b") == 1

    until(queued, 5, "A queued for b")
    start = time.monotonic()
    with pytest.raises(Deadlock) as refused:
        fencelock.Lock(r, "a", timeout=30).acquire(token="B", blocking_timeout=10)
    assert time.monotonic() - start < 1, "refused at once, not after the wait"
    assert refused.value.key == "a" and waiters(r, "a") == 0
    with pytest.raises(Deadlock) as refused_all:
        MultiLock(r, ["d", "a"], timeout=30).acquire(token="B", blocking_timeout=10)
    assert refused_all.value.key == "a", "the key the cycle runs through"
    assert r.exists("d") == 0
    b.release()
    join(task, 5)
    assert outcome == {"result": True}
    waiting.release()
    a.release()


# ---------------------------------------------------------------------------------
# Constructions of the client
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("construction", ["from_url", "blocking_pool"])
def test_constructions_carry_a_wait(server: Server, construction: str) -> None:
    """A wait longer than the client's socket timeout ends in the grant, through
    ``from_url`` and a ``BlockingConnectionPool`` of two connections."""
    if construction == "from_url":
        client = redis.Redis.from_url(server.url + "?socket_timeout=0.3")
    else:
        pool = redis.BlockingConnectionPool(
            port=server.port, max_connections=2, timeout=5, socket_timeout=0.3
        )
        client = redis.Redis(connection_pool=pool)
    client.flushall()
    holder = MultiLock(client, ["x", "y"], timeout=10, thread_local=False)
    assert holder.acquire(blocking=False)
    later(0.6, holder.release)
    waiter = MultiLock(client, ["y", "x"], timeout=10, blocking_timeout=5)
    start = time.monotonic()
    assert waiter.acquire()
    assert 0.5 < time.monotonic() - start < 3
    assert waiter.owned()
    waiter.release()

    locks = Locks(client)
    holder = MultiLock(client, ["lock:x"], timeout=10, thread_local=False)
    assert holder.acquire(blocking=False)
    later(0.6, holder.release)
    with locks.lock_all(["x", "y"], ttl=10, blocking_timeout=5) as held:
        assert len(held.fences) == 2 and held.owned()
    assert client.exists("lock:x", "lock:y") == 0
    locks.close()
    client.close()
    # A pool given to the client is not the client's to close.
    client.connection_pool.disconnect()


def test_a_server_without_the_module(tmp_path: Path) -> None:
    bare = Node(tmp_path / "bare", module=False)
    with stopping(bare):
        client = redis.Redis(host="127.0.0.1", port=bare.port)
        with pytest.raises(fencelock.ModuleNotLoaded, match=r"LOCK\.ACQUIREALL") as e:
            MultiLock(client, ["a", "b"], timeout=10).acquire(token="s3cret")
        assert "s3cret" not in str(e.value) and e.value.__context__ is None
        client.close()


# ---------------------------------------------------------------------------------
# Redis Cluster
# ---------------------------------------------------------------------------------


def acquireall_stats(cluster: list[Server]) -> tuple[int, int]:
    """``LOCK.ACQUIREALL`` calls run and refused (a redirect) over every node."""
    ran = refused = 0
    for node in cluster:
        with node.client() as client:
            stats = client.info("commandstats").get("cmdstat_lock.acquireall", {})
            ran += int(stats.get("calls", 0))
            refused += int(stats.get("rejected_calls", 0))
    return ran, refused


def test_cluster_routes_by_the_first_key(cluster: list[Server]) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    names = ["{order:7}:row", "{order:7}:customer", "{order:7}:stock"]
    ran, refused = acquireall_stats(cluster)
    multi = MultiLock(client, names, timeout=10)
    assert multi.acquire(blocking=False)
    assert multi.owned()
    assert acquireall_stats(cluster) == (ran + 1, refused), "no redirect"
    node = client.get_node_from_key(names[0])
    assert node is not None
    on_node = redis.Redis(host=node.host, port=int(node.port))
    token = multi.local.token
    assert [fence_of(on_node, name, token) for name in names] == multi.fences
    multi.release()
    assert client.exists(*names) == 0

    locks = Locks(client, prefix="")
    with locks.lock_all(names, ttl=0.3) as held:
        sleep(0.6)  # kept alive on the node of the keys
        held.ensure_held(check=True)
    assert client.exists(*names) == 0
    locks.close()
    on_node.close()
    client.close()


def test_cluster_keys_of_several_slots_are_refused(cluster: list[Server]) -> None:
    """Refused before anything is sent, with the error a CROSSSLOT reply raises:
    the servers themselves would grant them on the node of the first key."""
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    names = ["lock:a", "lock:b", "lock:c"]
    assert len({client.keyslot(name) for name in names}) > 1
    before = acquireall_stats(cluster)
    with pytest.raises(ClusterCrossSlotError):
        MultiLock(client, names, timeout=10).acquire(blocking=False)
    with pytest.raises(ClusterCrossSlotError):
        MultiLock(client, names, timeout=10).acquire(blocking_timeout=1)
    locks = Locks(client)
    with pytest.raises(ClusterCrossSlotError):
        with locks.lock_all(["a", "b"], ttl=5):
            pass
    assert acquireall_stats(cluster) == before, "nothing was sent"
    assert client.exists(*names) == 0
    client.close()
