"""``wait_replicas`` on a primary with one replica, and the locks on Redis Cluster
(three masters) through redis-py's cluster client: the drop-in lock and the manager on
keys of every master, a wait handed over and a wait longer than the socket timeout, a
lease kept by its refresher, and run once with its result."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
import redis.asyncio.cluster
from servers import Server, start_replica

import fencelock.asyncio

from .helpers import drop_in, join, later, sleep, spawn


@pytest.fixture
def primary_and_replica(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    primary = Server(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", primary)
    yield primary, replica
    replica.stop()
    primary.stop()


async def test_wait_replicas_confirms_the_grant_on_the_replica(
    primary_and_replica: tuple[Server, Server],
) -> None:
    primary, replica = primary_and_replica
    client = redis.asyncio.Redis(port=primary.port)
    on_replica = redis.asyncio.Redis(port=replica.port)
    locks = fencelock.asyncio.Locks(client)
    async with locks.lock("order", ttl=30, wait_replicas=1) as lease:
        # Acknowledged: the replica has the grant now, not eventually.
        fence = await on_replica.execute_command("LOCK.FENCE", "lock:order")
        assert fence == lease.fence
    lock = fencelock.asyncio.Lock(client, "drop-in", timeout=30, wait_replicas=1)
    assert await lock.acquire()
    assert await on_replica.execute_command("LOCK.FENCE", "drop-in") == lock.fence
    await lock.release()
    await locks.aclose()
    await client.aclose()
    await on_replica.aclose()


async def test_a_grant_not_replicated_in_time_is_released(
    primary_and_replica: tuple[Server, Server],
) -> None:
    primary, _ = primary_and_replica
    client = redis.asyncio.Redis(port=primary.port)
    locks = fencelock.asyncio.Locks(client)
    start = time.monotonic()
    with pytest.raises(fencelock.asyncio.NotReplicated) as raised:
        await locks.acquire("order", ttl=30, wait_replicas=2, wait_replicas_timeout=0.2)
    assert 0.2 <= time.monotonic() - start < 1
    # The one replica acknowledges within 0.2 s unless the machine is very busy.
    assert raised.value.wanted == 2 and raised.value.acknowledged in (0, 1)
    assert await client.exists("lock:order") == 0
    await locks.aclose()
    await client.aclose()


# Keys whose slots are on different masters (hash slots 0-5460, 5461-10922, ...).
CLUSTER_KEYS = ["lock:a", "lock:b", "lock:c", "lock:{order42}", "report"]


def cluster_client(cluster: list[Server], **kwargs: Any) -> Any:
    return redis.asyncio.cluster.RedisCluster(
        host="127.0.0.1", port=cluster[0].port, **kwargs
    )


async def nodes_of(client: Any, keys: list[str]) -> set[str]:
    """The names of the masters that own ``keys``."""
    await client.ping()  # the asyncio client learns the slots on its first command
    nodes = [client.get_node_from_key(key) for key in keys]
    assert None not in nodes
    return {node.name for node in nodes}


async def test_cluster_drop_in_lock_and_info(cluster: list[Server]) -> None:
    client = cluster_client(cluster)
    assert len(await nodes_of(client, CLUSTER_KEYS)) > 1, "keys on several nodes"
    for key in CLUSTER_KEYS:
        lock = drop_in(client, key, timeout=10)
        assert await lock.acquire(blocking=False)
        assert await lock.owned()
        assert await lock.extend(5)
        assert not await drop_in(client, key).acquire(blocking=False)
        await lock.release()
        assert not await lock.locked()
    locks = fencelock.asyncio.Locks(client, prefix="")
    # Held past its ttl, so only refreshes keep it: a 1 s ttl, since a 0.3 s lease was
    # seen lost once on a machine loaded 6 times over (its refresh came too late).
    async with locks.lock("{order42}:lock", ttl=1) as lease:
        await sleep(1.5)
        info = await locks.info("{order42}:lock")
        assert info is not None
        assert (info["held"], info["fence"], info["waiters"]) == (True, lease.fence, 0)
    await locks.aclose()
    await client.aclose()


async def test_cluster_handoff_and_refresh(cluster: list[Server]) -> None:
    client = cluster_client(cluster, socket_timeout=0.3)
    for key in CLUSTER_KEYS:
        lock = drop_in(client, key, timeout=10)
        assert await lock.acquire(blocking=False)
        assert await lock.owned()
        await lock.release()
    locks = fencelock.asyncio.Locks(client)
    holder = await locks.acquire("c", ttl=10)
    later(0.6, locks.release, holder)
    lease = await locks.acquire("c", ttl=10, wait=3)
    assert lease.fence > holder.fence
    async with locks.lock("a", ttl=0.3) as held:
        await sleep(0.5)
        assert not held.lost.is_set()
    await locks.release(lease)
    await locks.aclose()
    await client.aclose()


async def test_cluster_once_result(cluster: list[Server]) -> None:
    client = cluster_client(cluster, socket_timeout=0.3)
    locks = fencelock.asyncio.Locks(client, prefix="")
    # Keys of their own: a done record stays for its keep time.
    keys = [f"{key}.once" for key in CLUSTER_KEYS]
    assert len(await nodes_of(client, keys)) > 1
    for key in keys:
        waited: dict[str, Any] = {}

        async def duplicate(key: str = key, waited: dict[str, Any] = waited) -> None:
            async with locks.once_result(key, ttl=10, keep=30, wait=3) as once:
                waited["replayed"], waited["result"] = once.replayed, once.result

        async with locks.once_result(key, ttl=10, keep=30) as run:
            assert run.lease is not None
            waiter, _ = spawn(duplicate)
            await sleep(0.5)  # longer than the socket timeout: the wait reads on
            run.set({"key": key})
        await join(waiter, 5)
        assert waited == {"replayed": True, "result": {"key": key}}
        async with locks.once_result(key, ttl=10, keep=30) as replay:
            assert replay.replayed and replay.fence == run.fence
        await client.delete(key)
    await locks.aclose()
    await client.aclose()


async def test_cluster_wait_longer_than_the_socket_timeout(
    cluster: list[Server],
) -> None:
    client = cluster_client(cluster, socket_timeout=0.3)
    for key in CLUSTER_KEYS[:3]:
        holder = drop_in(client, key, timeout=10, thread_local=False)
        assert await holder.acquire(blocking=False)
        later(0.6, holder.release)
        waiter = drop_in(client, key, timeout=10, blocking_timeout=3)
        start = time.monotonic()
        assert await waiter.acquire()
        assert 0.5 < time.monotonic() - start < 2.5
        await waiter.release()
    await client.aclose()
