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
import redis.asyncio
import redis.asyncio.cluster
from redis.exceptions import ClusterCrossSlotError, LockError, LockNotOwnedError
from servers import Server
from setups import Node, stopping

import fencelock.asyncio
from fencelock.asyncio import (
    Deadlock,
    LockLost,
    LockNotAcquired,
    Locks,
    ManagedMultiLock,
    MultiLock,
    WrongMode,
)

from .helpers import join, later, sleep, spawn, until


async def calls(client: redis.asyncio.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``)."""
    stats = (await client.info("commandstats")).get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


async def fence_of(client: Any, key: str, token: Any) -> Any:
    return await client.execute_command("LOCK.FENCE", key, token)


async def waiters(client: Any, key: str) -> int:
    info = await fencelock.asyncio.lock_info(client, key)
    return 0 if info is None else info["waiters"]


# ---------------------------------------------------------------------------------
# Every key or none
# ---------------------------------------------------------------------------------


async def test_one_key_held_grants_nothing(r: redis.asyncio.Redis) -> None:
    other = fencelock.asyncio.Lock(r, "b", timeout=30)
    assert await other.acquire(blocking=False)
    multi = MultiLock(r, ["a", "b", "c"], timeout=30)
    assert not await multi.acquire(blocking=False)
    assert await r.exists("a", "c") == 0, "nothing granted while one key is held"
    assert multi.fences == [] and not await multi.owned()
    start = time.monotonic()
    assert not await multi.acquire(blocking_timeout=0.2)
    assert 0.2 <= time.monotonic() - start < 1
    assert await r.exists("a", "c") == 0
    assert await waiters(r, "b") == 0, "a wait that ended leaves no place in the queue"
    await other.release()
    assert await multi.acquire(blocking=False)
    assert await multi.owned() and await multi.locked()
    await multi.release()
    assert await r.exists("a", "b", "c") == 0 and not await multi.locked()


async def test_lock_all_one_key_held_grants_nothing(r: redis.asyncio.Redis) -> None:
    other = Locks(r)
    locks = Locks(r)
    async with other.lock("b", ttl=30):
        busy = locks.lock_all(["a", "b"], ttl=30, blocking=False)
        with pytest.raises(LockNotAcquired):
            async with busy:
                pass
        held = locks.lock_all(["a", "b"], ttl=30, blocking_timeout=0.2)
        assert await held.acquire() is False
        assert held.leases == [] and held.fences == []
        assert await r.exists("lock:a") == 0
        # ``wait`` as ``lock`` spells it: 0 one try, seconds a bounded wait.
        with pytest.raises(LockNotAcquired):
            async with locks.lock_all(["a", "b"], ttl=30, wait=0):
                pass
        start = time.monotonic()
        bounded = locks.lock_all(["a", "b"], ttl=30, wait=0.2)
        with pytest.raises(LockNotAcquired):
            async with bounded:
                pass
        assert 0.2 <= time.monotonic() - start < 1
    assert len(locks._refresher._schedule) == 0


async def test_a_waiter_is_granted_every_key_once_all_are_free(
    r: redis.asyncio.Redis,
) -> None:
    first = fencelock.asyncio.Lock(r, "a", timeout=30, thread_local=False)
    second = fencelock.asyncio.Lock(r, "b", timeout=30, thread_local=False)
    assert await first.acquire(blocking=False) and await second.acquire(blocking=False)
    multi = MultiLock(r, ["a", "b"], timeout=30, blocking_timeout=5, thread_local=False)
    task, outcome = spawn(multi.acquire)

    async def queued() -> bool:
        return await waiters(r, "a") == 1 and await waiters(r, "b") == 1

    await until(queued, 5, "queued")
    await first.release()
    await sleep(0.2)
    assert "result" not in outcome, "not granted while one key is still held"
    assert await r.exists("a") == 0, (
        "the free key stays free for the waiter at its head"
    )
    assert not await fencelock.asyncio.Lock(r, "a", timeout=30).acquire(blocking=False)
    await second.release()
    await join(task, 5)
    assert outcome == {"result": True}
    assert first.fence is not None and second.fence is not None
    assert min(multi.fences) > max(first.fence, second.fence)
    await multi.release()


async def test_fences_in_the_order_of_the_keys(r: redis.asyncio.Redis) -> None:
    names = ["z", "m", "a"]
    multi = MultiLock(r, names, timeout=30)
    assert await multi.acquire(token="mine")
    assert len(multi.fences) == 3
    assert [await fence_of(r, name, "mine") for name in names] == multi.fences
    earlier = multi.fences
    await multi.release()
    assert multi.fences == earlier, "kept after the release, as Lock.fence is"
    assert await multi.acquire()
    assert min(multi.fences) > max(earlier), "a later grant has larger fences"
    await multi.release()

    locks = Locks(r)
    async with locks.lock_all(["z", "m", "a"], ttl=30) as held:
        assert held.fences == [lease.fence for lease in held.leases]
        assert [lease.key for lease in held.leases] == ["lock:z", "lock:m", "lock:a"]
        for lease in held.leases:
            assert await fence_of(r, str(lease.key), lease.token) == lease.fence
            assert lease.token == held.leases[0].token, "one token for every key"


async def test_release_is_one_release_per_key(r: redis.asyncio.Redis) -> None:
    multi = MultiLock(r, ["a", "b", "c"], timeout=30)
    assert await multi.acquire(token="t")
    before = await calls(r, "lock.release")
    await multi.release()
    assert await calls(r, "lock.release") - before == 3
    assert await r.exists("a", "b", "c") == 0

    # Each key is a holding of its own: one released alone leaves the others held.
    assert await multi.acquire(token="t")
    assert await r.execute_command("LOCK.RELEASE", "b", "t") == 1
    assert await r.exists("a", "c") == 2 and await r.exists("b") == 0
    assert not await multi.owned()
    with pytest.raises(LockNotOwnedError, match="'b'"):
        await multi.release()
    assert await r.exists("a", "b", "c") == 0, "the others are released all the same"
    with pytest.raises(LockError, match="not owned or is already unlocked"):
        await multi.release()


async def test_lock_all_releases_each_key_on_leaving(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    before = await calls(r, "lock.release")
    async with locks.lock_all(["a", "b"], ttl=30) as held:
        assert await r.exists("lock:a", "lock:b") == 2
    assert await calls(r, "lock.release") - before == 2
    assert await r.exists("lock:a", "lock:b") == 0
    assert len(held.leases) == 2 and all(lease.released for lease in held.leases)


async def test_extend_and_reacquire_refresh_each_key(r: redis.asyncio.Redis) -> None:
    multi = MultiLock(r, ["a", "b"], timeout=10)
    with pytest.raises(LockError, match="Cannot extend an unlocked lock"):
        await multi.extend(10)
    assert await multi.acquire()
    assert await multi.extend(10)
    assert all([16_000 < await r.pttl(key) <= 20_000 for key in ("a", "b")])
    assert await multi.extend(5, replace_ttl=True)
    assert all([4_000 < await r.pttl(key) <= 5_000 for key in ("a", "b")])
    assert await multi.reacquire()
    assert all([8_000 < await r.pttl(key) <= 10_000 for key in ("a", "b")])
    await r.delete("b")
    with pytest.raises(LockNotOwnedError, match="Cannot extend a lock"):
        await multi.extend(10)
    with pytest.raises(LockNotOwnedError):
        await multi.release()


async def test_without_a_timeout_every_key_is_permanent(r: redis.asyncio.Redis) -> None:
    multi = MultiLock(r, ["a", "b"])
    assert await multi.acquire()
    assert await r.pttl("a") == -1 and await r.pttl("b") == -1
    with pytest.raises(LockError, match="no timeout"):
        await multi.extend(1)
    await multi.release()
    assert await r.exists("a", "b") == 0


async def test_shared_holders_hold_every_key_together(r: redis.asyncio.Redis) -> None:
    readers = [MultiLock(r, ["a", "b"], timeout=30, shared=True) for _ in range(2)]
    assert all([await reader.acquire(blocking=False) for reader in readers])
    writer = MultiLock(r, ["b", "c"], timeout=30)
    assert not await writer.acquire(blocking=False)
    assert await r.exists("c") == 0
    for reader in readers:
        await reader.release()
    assert await writer.acquire(blocking=False, token="w")
    # A reader is busy while a writer holds a key; the writer's own token asking
    # for a reader's holding is refused, naming the key.
    assert not await MultiLock(r, ["c"], timeout=30, shared=True).acquire(
        blocking=False
    )
    with pytest.raises(WrongMode) as refused:
        await MultiLock(r, ["a", "c"], timeout=30, shared=True).acquire(
            blocking=False, token="w"
        )
    assert refused.value.key == "c" and refused.value.mode == "exclusive"
    assert await r.exists("a") == 0
    await writer.release()
    with pytest.raises(ValueError, match="needs a timeout"):
        MultiLock(r, ["a"], shared=True)

    locks = Locks(r)
    one = locks.lock_all(["a", "b"], ttl=30, shared=True)
    two = locks.lock_all(["a", "b"], ttl=30, shared=True)
    async with one, two:
        assert [lease.mode for lease in one.leases + two.leases] == ["shared"] * 4
        info = await fencelock.asyncio.lock_info(r, "lock:a")
        assert info is not None and info["holders"] == 2


async def test_the_names_are_checked_before_anything_is_sent(
    r: redis.asyncio.Redis,
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


async def test_multilock_context_manager(r: redis.asyncio.Redis) -> None:
    async with MultiLock(r, ["a", "b"], timeout=30, blocking_timeout=0.2) as multi:
        assert await multi.owned()
        assert await r.exists("a", "b") == 2
        assert len(multi.fences) == 2
    assert await r.exists("a", "b") == 0

    await r.set("b", "a plain value")
    busy = MultiLock(r, ["a", "b"], timeout=30, blocking_timeout=0.2)
    with pytest.raises(LockError, match="Unable to acquire lock"):
        async with busy:
            pass
    assert await r.exists("a") == 0
    await r.delete("b")

    async with MultiLock(r, ["a", "b"], timeout=0.1, raise_on_release_error=False):
        await sleep(0.15)
    short = MultiLock(r, ["a", "b"], timeout=0.1)
    with pytest.raises(LockNotOwnedError):
        async with short:
            await sleep(0.15)


async def test_lock_all_context_manager_and_its_leases(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    held = locks.lock_all(["a", "b"], ttl=30)
    assert isinstance(held, ManagedMultiLock) and isinstance(held, MultiLock)
    async with held:
        await held.ensure_held()
        await held.ensure_held(check=True)
        assert await held.owned() and not held.lost
        assert 29 < held.time_left <= 30
    with pytest.raises(LockError, match="not held"):
        await held.ensure_held()

    # Lost while held: leaving raises LockLost, after releasing the rest.
    with pytest.raises(LockLost) as lost:
        async with locks.lock_all(["a", "b"], ttl=30) as held:
            await r.delete("lock:b")
            with pytest.raises(LockLost):
                await held.ensure_held(check=True)
    assert lost.value.reason == LockLost.GONE
    assert await r.exists("lock:a") == 0
    async with locks.lock_all(["a", "b"], ttl=30, lost_ok=True):
        await r.delete("lock:a")

    # An exception of the block goes on unchanged, and everything is released.
    with pytest.raises(KeyError):
        async with locks.lock_all(["a", "b"], ttl=30):
            raise KeyError("the job failed")
    assert await r.exists("lock:a", "lock:b") == 0


async def test_an_acquire_that_waits_for_its_own_thread_is_refused(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r)
    async with locks.lock("b", ttl=30):
        with pytest.raises(WrongMode, match="wait for itself"):
            await locks.lock_all(["a", "b"], ttl=30, blocking_timeout=5).acquire()
        assert await r.exists("lock:a") == 0
    async with locks.lock_all(["a", "b"], ttl=30):
        with pytest.raises(WrongMode, match="wait for itself"):
            await locks.acquire("a", ttl=30, wait=5)
        with pytest.raises(LockNotAcquired):
            await locks.acquire("a", ttl=30)
        with pytest.raises(LockNotAcquired):
            async with locks.lock_all(["b"], ttl=30, blocking=False):
                pass


# ---------------------------------------------------------------------------------
# Sessions, refreshes, long waits, close()
# ---------------------------------------------------------------------------------

TTL = 0.3


async def test_lock_all_joins_the_managers_session(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    async with locks.lock("single", ttl=TTL) as single:
        async with locks.lock_all(["a", "b", "c"], ttl=TTL) as held:
            session = single.session
            assert session is not None
            assert {lease.session for lease in held.leases} == {session}
            listed = await r.execute_command("LOCK.HELD", session)
            assert sorted(entry[0] for entry in listed) == [
                b"lock:a",
                b"lock:b",
                b"lock:c",
                b"lock:single",
            ]
            refreshes = await calls(r, "lock.refresh")
            keepalives = await calls(r, "lock.keepalive")
            await sleep(4 * TTL)
            assert await calls(r, "lock.refresh") == refreshes, "no refresh per key"
            assert await calls(r, "lock.keepalive") - keepalives >= 5
            assert await r.exists("lock:a", "lock:b", "lock:c") == 3
            await held.ensure_held()
        assert len(await r.execute_command("LOCK.HELD", session)) == 1
    assert await r.execute_command("LOCK.HELD", session) == []


async def test_lock_all_without_a_session_refreshes_each_key(
    r: redis.asyncio.Redis,
) -> None:
    locks = Locks(r, session=False)
    async with locks.lock_all(["a", "b"], ttl=TTL) as held:
        assert {lease.session for lease in held.leases} == {None}
        refreshes = await calls(r, "lock.refresh")
        keepalives = await calls(r, "lock.keepalive")
        await sleep(4 * TTL)
        # Every ttl/3, one LOCK.REFRESH per key.
        assert await calls(r, "lock.refresh") - refreshes >= 2 * 6
        assert await calls(r, "lock.keepalive") == keepalives
        assert await r.exists("lock:a", "lock:b") == 2
        await held.ensure_held()
    assert await r.exists("lock:a", "lock:b") == 0

    async with Locks(r).lock_all(["a", "b"], ttl=TTL, session=False) as alone:
        assert {lease.session for lease in alone.leases} == {None}
        await sleep(2 * TTL)
        await alone.ensure_held()


@pytest.mark.parametrize("wait", [1.0, 2.6], ids=["longer-than-a-third", "longer"])
async def test_a_long_wait_is_confirmed_before_the_session_counts_it(
    r: redis.asyncio.Redis, wait: float
) -> None:
    """A wait longer than ttl/3 (or than the ttl itself) ends in a grant whose lease
    started long after the acquire was sent: one refresh of every key gives the
    leases a deadline the client can count on. (A ttl of 2.4 s: the session's
    keepalive every 0.8 s outlasts a stall of a loaded machine.)"""
    ttl = 2.4
    holder = fencelock.asyncio.Lock(r, "lock:b", timeout=30, thread_local=False)
    assert await holder.acquire()
    later(wait, holder.release)
    locks = Locks(r)
    refreshes = await calls(r, "lock.refresh")
    async with locks.lock_all(["a", "b"], ttl=ttl, blocking_timeout=5) as held:
        assert await calls(r, "lock.refresh") - refreshes == 2, "one refresh per key"
        assert held.time_left > ttl - 0.2
        await held.ensure_held()
        await sleep(ttl)  # the session keeps them from here on
        await held.ensure_held(check=True)


async def test_close_releases_the_keys_of_lock_all(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    held = locks.lock_all(["a", "b"], ttl=30)
    assert await held.acquire()
    await locks.aclose()
    assert await r.exists("lock:a", "lock:b") == 0
    assert held.lost
    with pytest.raises(LockLost) as lost:
        await held.release()
    assert lost.value.reason == LockLost.CLOSED


# ---------------------------------------------------------------------------------
# Deadlock
# ---------------------------------------------------------------------------------


async def test_a_drop_in_wait_that_closes_a_cycle_raises_deadlock(
    r: redis.asyncio.Redis,
) -> None:
    """Without sessions the owner is the token: token A holds a and waits for b and
    c, token B holds b and asks for a."""
    a = fencelock.asyncio.Lock(r, "a", timeout=30, thread_local=False)
    b = MultiLock(r, ["b"], timeout=30, thread_local=False)
    assert await a.acquire(token="A") and await b.acquire(token="B")
    waiting = MultiLock(
        r, ["b", "c"], timeout=30, blocking_timeout=10, thread_local=False
    )
    task, outcome = spawn(lambda: waiting.acquire(token="A"))

    async def queued() -> bool:
        return await waiters(r, "b") == 1

    await until(queued, 5, "A queued for b")
    start = time.monotonic()
    with pytest.raises(Deadlock) as refused:
        await fencelock.asyncio.Lock(r, "a", timeout=30).acquire(
            token="B", blocking_timeout=10
        )
    assert time.monotonic() - start < 1, "refused at once, not after the wait"
    assert refused.value.key == "a" and await waiters(r, "a") == 0
    with pytest.raises(Deadlock) as refused_all:
        await MultiLock(r, ["d", "a"], timeout=30).acquire(
            token="B", blocking_timeout=10
        )
    assert refused_all.value.key == "a", "the key the cycle runs through"
    assert await r.exists("d") == 0
    await b.release()
    await join(task, 5)
    assert outcome == {"result": True}
    await waiting.release()
    await a.release()


# ---------------------------------------------------------------------------------
# Constructions of the client
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("construction", ["from_url", "blocking_pool"])
async def test_constructions_carry_a_wait(server: Server, construction: str) -> None:
    """A wait longer than the client's socket timeout ends in the grant, through
    ``from_url`` and a ``BlockingConnectionPool`` of two connections."""
    if construction == "from_url":
        client = redis.asyncio.Redis.from_url(server.url + "?socket_timeout=0.3")
    else:
        pool = redis.asyncio.BlockingConnectionPool(
            port=server.port, max_connections=2, timeout=5, socket_timeout=0.3
        )
        client = redis.asyncio.Redis(connection_pool=pool)
    await client.flushall()
    holder = MultiLock(client, ["x", "y"], timeout=10, thread_local=False)
    assert await holder.acquire(blocking=False)
    later(0.6, holder.release)
    waiter = MultiLock(client, ["y", "x"], timeout=10, blocking_timeout=5)
    start = time.monotonic()
    assert await waiter.acquire()
    assert 0.5 < time.monotonic() - start < 3
    assert await waiter.owned()
    await waiter.release()

    locks = Locks(client)
    holder = MultiLock(client, ["lock:x"], timeout=10, thread_local=False)
    assert await holder.acquire(blocking=False)
    later(0.6, holder.release)
    async with locks.lock_all(["x", "y"], ttl=10, blocking_timeout=5) as held:
        assert len(held.fences) == 2 and await held.owned()
    assert await client.exists("lock:x", "lock:y") == 0
    await locks.aclose()
    await client.aclose()
    # A pool given to the client is not the client's to close.
    await client.connection_pool.disconnect()


async def test_a_server_without_the_module(tmp_path: Path) -> None:
    bare = Node(tmp_path / "bare", module=False)
    with stopping(bare):
        client = redis.asyncio.Redis(host="127.0.0.1", port=bare.port)
        with pytest.raises(
            fencelock.asyncio.ModuleNotLoaded, match=r"LOCK\.ACQUIREALL"
        ) as e:
            await MultiLock(client, ["a", "b"], timeout=10).acquire(token="s3cret")
        assert "s3cret" not in str(e.value) and e.value.__context__ is None
        await client.aclose()


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


async def test_cluster_routes_by_the_first_key(cluster: list[Server]) -> None:
    client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    names = ["{order:7}:row", "{order:7}:customer", "{order:7}:stock"]
    ran, refused = acquireall_stats(cluster)
    multi = MultiLock(client, names, timeout=10)
    assert await multi.acquire(blocking=False)
    assert await multi.owned()
    assert acquireall_stats(cluster) == (ran + 1, refused), "no redirect"
    node = client.get_node_from_key(names[0])
    assert node is not None
    on_node = redis.asyncio.Redis(host=node.host, port=int(node.port))
    token = multi.local.token
    assert [await fence_of(on_node, name, token) for name in names] == multi.fences
    await multi.release()
    assert await client.exists(*names) == 0

    locks = Locks(client, prefix="")
    async with locks.lock_all(names, ttl=0.3) as held:
        await sleep(0.6)  # kept alive on the node of the keys
        await held.ensure_held(check=True)
    assert await client.exists(*names) == 0
    await locks.aclose()
    await on_node.aclose()
    await client.aclose()


async def test_cluster_keys_of_several_slots_are_refused(cluster: list[Server]) -> None:
    """Refused before anything is sent, with the error a CROSSSLOT reply raises:
    the servers themselves would grant them on the node of the first key."""
    client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    names = ["lock:a", "lock:b", "lock:c"]
    assert len({client.keyslot(name) for name in names}) > 1
    before = acquireall_stats(cluster)
    with pytest.raises(ClusterCrossSlotError):
        await MultiLock(client, names, timeout=10).acquire(blocking=False)
    with pytest.raises(ClusterCrossSlotError):
        await MultiLock(client, names, timeout=10).acquire(blocking_timeout=1)
    locks = Locks(client)
    with pytest.raises(ClusterCrossSlotError):
        async with locks.lock_all(["a", "b"], ttl=5):
            pass
    assert acquireall_stats(cluster) == before, "nothing was sent"
    assert await client.exists(*names) == 0
    await client.aclose()
