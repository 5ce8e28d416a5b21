"""What asyncio adds for ``fencelock.asyncio.Semaphore`` and ``ReadWriteLock``:
tasks holding permits or the read lock at once through one object (each with its
own lease), and a cancelled wait that leaves nothing held. The cases both sides share
are in ``tests/_async/test_shared.py`` (``tests/_sync`` generated)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis.asyncio
from conftest import async_client, run
from redis.exceptions import LockNotOwnedError

from fencelock.asyncio import Lock, ReadWriteLock, Semaphore, WrongMode, lock_info


def scenario(url: str, body: Any, **client_kwargs: Any) -> None:
    async def main() -> None:
        client = async_client(url, **client_kwargs)
        try:
            await body(client)
        finally:
            await client.aclose()

    run(main())


async def count(client: redis.asyncio.Redis, key: str, field: str) -> int:
    found = await lock_info(client, key)
    return 0 if found is None else int(found[field])  # type: ignore[literal-required]


async def until(client: redis.asyncio.Redis, key: str, field: str, n: int) -> None:
    deadline = time.monotonic() + 5
    while await count(client, key, field) != n:
        assert time.monotonic() < deadline, f"{field} never reached {n}"
        await asyncio.sleep(0.01)


def test_tasks_share_one_semaphore(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        permits = Semaphore(r, "sem", 3, timeout=10)
        inside = 0
        most = 0
        fences: list[Any] = []

        async def worker() -> None:
            nonlocal inside, most
            async with permits:
                assert await permits.owned()
                fences.append(permits.fence)
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.1)
                inside -= 1

        # Every worker's token is its own: each release gives back its own permit.
        await asyncio.gather(*(worker() for _ in range(7)))
        assert most == 3
        assert len(set(fences)) == 7
        assert await r.exists("sem") == 0

    scenario(url, body)


def test_the_token_of_a_shared_lock_is_the_tasks(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        permits = Semaphore(r, "sem", 3, timeout=10)
        assert await permits.acquire(blocking=False)
        # Tasks started after the acquire see its token (a context is copied).
        owned, reply = await asyncio.gather(
            permits.owned(), permits.guard("SET", "k", "v")
        )
        assert owned is True and reply == b"OK"
        # A task's own acquire is its own permit, not this task's.
        assert await asyncio.ensure_future(permits.acquire(blocking=False))
        assert await count(r, "sem", "holders") == 2
        await permits.release()
        assert await count(r, "sem", "holders") == 1
        # thread_local=False: one token for the object, whichever task uses it.
        handed = Semaphore(r, "other", 3, timeout=10, thread_local=False)
        assert await asyncio.ensure_future(handed.acquire(blocking=False))
        await handed.release()
        assert await r.exists("other") == 0

    scenario(url, body)


def test_readers_together_writer_after_them(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        rw = ReadWriteLock(r, "cfg", timeout=10)
        assert rw.read() is rw.read() and isinstance(rw.write(), Lock)
        order: list[str] = []
        readers_in = asyncio.Event()
        inside = 0

        async def reader(name: str) -> None:
            nonlocal inside
            async with rw.read():
                order.append(name)
                inside += 1
                if inside == 3:
                    readers_in.set()
                await readers_in.wait()
                await asyncio.sleep(0.1)
                order.append(f"{name} leaves")

        async def writer() -> None:
            await readers_in.wait()
            async with rw.write():
                order.append("writer")
                assert await count(r, "cfg", "holders") == 1

        await asyncio.gather(reader("a"), reader("b"), reader("c"), writer())
        assert sorted(order[:3]) == ["a", "b", "c"]
        assert order[-1] == "writer", "the writer waited for every reader"
        assert not await rw.locked()

    scenario(url, body)


def test_a_reader_queues_behind_a_waiting_writer(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        first = ReadWriteLock(r, "cfg", timeout=10, thread_local=False)
        assert await first.read().acquire(blocking=False)
        order: list[str] = []

        async def take(lock: Lock, name: str) -> None:
            assert await lock.acquire(blocking_timeout=5)
            order.append(name)
            await asyncio.sleep(0.1)
            await lock.release()

        writer = asyncio.ensure_future(
            take(ReadWriteLock(r, "cfg", timeout=10).write(), "writer")
        )
        await until(r, "cfg", "waiters", 1)
        late = ReadWriteLock(r, "cfg", timeout=10)
        assert not await late.read().acquire(blocking=False)
        readers = [
            asyncio.ensure_future(take(late.read(), f"reader{i}")) for i in range(2)
        ]
        await until(r, "cfg", "waiters", 3)
        assert await count(r, "cfg", "waiters_shared") == 2
        await first.read().release()
        await asyncio.gather(writer, *readers)
        assert order[0] == "writer"
        assert sorted(order[1:]) == ["reader0", "reader1"]

    scenario(url, body)


def test_no_upgrade_and_per_holder_leases(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        rw = ReadWriteLock(r, "cfg", timeout=0.3)
        assert await rw.read().acquire(blocking=False, token="me")
        with pytest.raises(WrongMode) as raised:
            await rw.write().acquire(blocking=False, token="me")
        assert raised.value.mode == "shared"
        other = ReadWriteLock(r, "cfg", timeout=30).read()
        assert await other.acquire(blocking=False)
        await asyncio.sleep(0.5)
        assert not await rw.read().owned(), "its own lease ended"
        assert await other.owned()
        with pytest.raises(LockNotOwnedError):
            await rw.read().release()
        await other.release()

    scenario(url, body)


def test_a_cancelled_wait_leaves_no_permit(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        holder = Semaphore(r, "sem", 1, timeout=10)
        assert await holder.acquire(blocking=False)
        waiter = Semaphore(r, "sem", 1, timeout=10)
        task = asyncio.ensure_future(waiter.acquire(blocking_timeout=5))
        await until(r, "sem", "waiters", 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(r, "sem", "waiters", 0)
        await holder.release()
        assert await r.exists("sem") == 0

    scenario(url, body)
