"""``wait_replicas`` on a primary with one replica, and the locks on Redis Cluster
(three masters) through redis-py's sync and asyncio cluster clients."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
from conftest import run
from servers import Server, start_replica

import fencelock
import fencelock.asyncio


@pytest.fixture
def primary_and_replica(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    primary = Server(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", primary)
    yield primary, replica
    replica.stop()
    primary.stop()


def test_wait_replicas_confirms_the_grant_on_the_replica(
    primary_and_replica: tuple[Server, Server],
) -> None:
    primary, replica = primary_and_replica
    client, on_replica = primary.client(), replica.client()
    locks = fencelock.Locks(client)
    with locks.lock("order", ttl=30, wait_replicas=1) as lease:
        # Acknowledged: the replica has the grant now, not eventually.
        assert on_replica.execute_command("LOCK.FENCE", "lock:order") == lease.fence
    lock = fencelock.Lock(client, "drop-in", timeout=30, wait_replicas=1)
    assert lock.acquire()
    assert on_replica.execute_command("LOCK.FENCE", "drop-in") == lock.fence
    lock.release()


def test_a_grant_not_replicated_in_time_is_released(
    primary_and_replica: tuple[Server, Server],
) -> None:
    primary, _ = primary_and_replica
    client = primary.client()
    locks = fencelock.Locks(client)
    start = time.monotonic()
    with pytest.raises(fencelock.NotReplicated) as raised:
        locks.acquire("order", ttl=30, wait_replicas=2, wait_replicas_timeout=0.2)
    assert 0.2 <= time.monotonic() - start < 1
    # The one replica acknowledges within 0.2 s unless the machine is very busy.
    assert raised.value.wanted == 2 and raised.value.acknowledged in (0, 1)
    assert client.exists("lock:order") == 0

    async def main() -> None:
        async_client = redis.asyncio.Redis(port=primary.port)
        with pytest.raises(fencelock.NotReplicated):
            await fencelock.asyncio.Locks(async_client).acquire(
                "order", ttl=30, wait_replicas=2, wait_replicas_timeout=0.2
            )
        await async_client.aclose()

    run(main())
    assert client.exists("lock:order") == 0


# Keys whose slots are on different masters (hash slots 0-5460, 5461-10922, ...).
CLUSTER_KEYS = ["lock:a", "lock:b", "lock:c", "lock:{order42}", "report"]


def test_cluster_sync(cluster: list[Server]) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    slots_nodes = {client.get_node_from_key(key).name for key in CLUSTER_KEYS}
    assert len(slots_nodes) > 1, "the keys are spread over several nodes"
    for key in CLUSTER_KEYS:
        lock = client.lock(key, timeout=10, lock_class=fencelock.Lock)
        assert lock.acquire(blocking=False)
        assert lock.owned()
        assert lock.extend(5)
        assert not client.lock(key, lock_class=fencelock.Lock).acquire(blocking=False)
        lock.release()
        assert not lock.locked()
    locks = fencelock.Locks(client, prefix="")
    with locks.lock("{order42}:lock", ttl=0.3) as lease:
        time.sleep(0.5)
        info = locks.info("{order42}:lock")
        assert info is not None
        assert (info["held"], info["fence"], info["waiters"]) == (True, lease.fence, 0)
    client.close()


def test_cluster_once_result(cluster: list[Server]) -> None:
    client = redis.cluster.RedisCluster(
        host="127.0.0.1", port=cluster[0].port, socket_timeout=0.3
    )
    locks = fencelock.Locks(client, prefix="")
    # Keys of their own: a done record stays for its keep time.
    keys = [f"{key}.once" for key in CLUSTER_KEYS]
    assert len({client.get_node_from_key(key).name for key in keys}) > 1
    for key in keys:
        waited: dict[str, Any] = {}

        def duplicate(key: str = key, waited: dict[str, Any] = waited) -> None:
            with locks.once_result(key, ttl=10, keep=30, wait=3) as once:
                waited["replayed"], waited["result"] = once.replayed, once.result

        with locks.once_result(key, ttl=10, keep=30) as run:
            assert run.lease is not None
            waiter = threading.Thread(target=duplicate)
            waiter.start()
            time.sleep(0.5)  # longer than the socket timeout: the wait reads on
            run.set({"key": key})
        waiter.join(5)
        assert waited == {"replayed": True, "result": {"key": key}}
        with locks.once_result(key, ttl=10, keep=30) as replay:
            assert replay.replayed and replay.fence == run.fence
        client.delete(key)
    locks.close()
    client.close()


def test_cluster_wait_longer_than_the_socket_timeout(cluster: list[Server]) -> None:
    client = redis.cluster.RedisCluster(
        host="127.0.0.1", port=cluster[0].port, socket_timeout=0.3
    )
    for key in CLUSTER_KEYS[:3]:
        holder = client.lock(
            key, timeout=10, lock_class=fencelock.Lock, thread_local=False
        )
        assert holder.acquire(blocking=False)
        releaser = threading.Timer(0.6, holder.release)
        releaser.start()
        waiter = client.lock(
            key, timeout=10, blocking_timeout=3, lock_class=fencelock.Lock
        )
        start = time.monotonic()
        assert waiter.acquire()
        assert 0.5 < time.monotonic() - start < 2.5
        releaser.join()
        waiter.release()
    client.close()


def test_cluster_asyncio(cluster: list[Server]) -> None:
    async def main() -> None:
        client = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=cluster[0].port, socket_timeout=0.3
        )
        for key in CLUSTER_KEYS:
            lock = client.lock(key, timeout=10, lock_class=fencelock.asyncio.Lock)
            assert await lock.acquire(blocking=False)
            assert await lock.owned()
            await lock.release()
        locks = fencelock.asyncio.Locks(client)
        holder = await locks.acquire("c", ttl=10)

        async def release_later() -> None:
            await asyncio.sleep(0.6)
            await locks.release(holder)

        _, lease = await asyncio.gather(
            release_later(), locks.acquire("c", ttl=10, wait=3)
        )
        assert lease.fence > holder.fence
        async with locks.lock("a", ttl=0.3) as held:
            await asyncio.sleep(0.5)
            assert not held.lost.is_set()
        await client.aclose()

    run(main())
