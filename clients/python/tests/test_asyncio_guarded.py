"""Guarded and fenced writes from asyncio clients against a real server (the sync ones
are in ``test_guarded``): ``lease.guard`` and ``lock.guard`` while held and after the
lease ended, ``fencelock.asyncio.fenced``, and both on ``redis.asyncio``'s cluster
client."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
from conftest import async_client, run
from redis.exceptions import LockNotOwnedError
from servers import Server

import fencelock.asyncio
from fencelock.asyncio import LockLost, Locks, StaleFence, fenced

STOCK = "{sku}:stock"


def test_lease_guard(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = Locks(client)
        async with locks.lock("{sku}", ttl=30) as lease:
            assert await lease.guard("SET", STOCK, 10) == b"OK"
            assert await lease.guard("DECRBY", STOCK, 3) == 7
        with pytest.raises(LockLost):
            await lease.guard("SET", STOCK, 0)
        assert not lease.lost.is_set()
        expiring = await locks.acquire("{sku}", ttl=0.1)
        await asyncio.sleep(0.2)
        with pytest.raises(LockLost):
            await expiring.guard("SET", STOCK, 0)
        assert expiring.lost.is_set()
        assert await client.get(STOCK) == b"7"
        await client.aclose()

    run(main())


def test_lock_guard(url: str) -> None:
    async def main() -> None:
        client = async_client(url, decode_responses=True)
        lock = fencelock.asyncio.Lock(client, "{sku}", timeout=0.2)
        assert await lock.acquire(blocking=False)
        assert await lock.guard("SET", STOCK, "a") == "OK"
        await asyncio.sleep(0.3)
        with pytest.raises(LockNotOwnedError) as raised:
            await lock.guard("SET", STOCK, "b")
        assert isinstance(raised.value, LockLost)
        assert await client.get(STOCK) == "a"
        await client.aclose()

    run(main())


def test_fenced(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        assert await fenced(client, "mark:ledger", 41, "SET", "ledger", 1) == b"OK"
        assert await fenced(client, "mark:ledger", 41, "INCR", "ledger") == 2
        assert await fenced(client, "mark:ledger", 50, "INCR", "ledger") == 3
        with pytest.raises(StaleFence) as raised:
            await fenced(client, "mark:ledger", 49, "SET", "ledger", 0)
        assert raised.value.highest == 50
        assert await client.get("ledger") == b"3"
        await client.aclose()

    run(main())


def test_cluster(cluster: list[Server]) -> None:
    async def main() -> None:
        client = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=cluster[0].port
        )
        locks = Locks(client)
        for tag in ("{a}", "{b}", "{c}"):
            async with locks.lock(tag, ttl=30) as lease:
                assert await lease.guard("INCRBY", f"{tag}:n", 2) == 2
            with pytest.raises(LockLost):
                await lease.guard("INCRBY", f"{tag}:n", 2)
            assert await fenced(client, f"{tag}:mark", 9, "INCR", f"{tag}:n") == 3
            with pytest.raises(StaleFence):
                await fenced(client, f"{tag}:mark", 8, "INCR", f"{tag}:n")
            assert await client.get(f"{tag}:n") == b"3"
            await client.delete(f"{tag}:n", f"{tag}:mark")
        await client.aclose()

    run(main())


def test_the_asyncio_functions_refuse_a_sync_client(r: redis.Redis) -> None:
    """The reverse: a sync client's replies are not awaitable, so the asyncio side
    refuses it at once too, naming the sync twin."""
    with pytest.raises(TypeError, match=r"for a sync client use fencelock\.fenced$"):
        asyncio.run(fenced(r, "mark:ledger", 1, "SET", "ledger", 0))
    with pytest.raises(TypeError, match=r"use fencelock\.lock_info$"):
        asyncio.run(fencelock.asyncio.lock_info(r, "k"))
    for name, make in [
        ("Lock", lambda: r.lock("k", timeout=5, lock_class=fencelock.asyncio.Lock)),
        ("Locks", lambda: fencelock.asyncio.Locks(r)),
        ("Semaphore", lambda: fencelock.asyncio.Semaphore(r, "k", 2, timeout=5)),
    ]:
        with pytest.raises(TypeError) as refused:
            make()
        assert str(refused.value).endswith(f"use fencelock.{name}"), name
    assert r.get("ledger") is None
