"""``fencelock.asyncio.Semaphore`` and ``fencelock.asyncio.ReadWriteLock`` against a
real server: the sync behaviour (see ``test_shared``) awaited, and what asyncio adds:
tasks holding permits or the read lock at once through one object, and a cancelled
wait that leaves nothing held."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis.asyncio
from conftest import async_client, run
from redis.exceptions import LockError, LockNotOwnedError, ResponseError

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


@pytest.mark.parametrize("decode_responses", [False, True])
def test_permits_busy_and_release(url: str, decode_responses: bool) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        permits = [Semaphore(r, "sem", 2, timeout=10) for _ in range(3)]
        assert [await p.acquire(blocking=False) for p in permits] == [
            True,
            True,
            False,
        ]
        assert await permits[0].owned() and not await permits[2].owned()
        assert await permits[2].locked()
        found = await lock_info(r, "sem")
        assert found is not None
        assert (found["mode"], found["holders"], found["limit"]) == ("semaphore", 2, 2)
        assert await permits[0].extend(5)
        assert await permits[0].reacquire()
        await permits[0].release()
        assert not await permits[2].locked()
        assert await permits[2].acquire(blocking=False)
        assert permits[2].fence > permits[1].fence  # type: ignore[operator]
        await permits[1].release()
        await permits[2].release()
        assert await r.exists("sem") == 0

    scenario(url, body, decode_responses=decode_responses)


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


def test_a_waiting_permit_is_granted_on_release(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        holder = Semaphore(r, "sem", 1, timeout=10)
        assert await holder.acquire(blocking=False)
        waiter = Semaphore(r, "sem", 1, timeout=10)
        start = time.monotonic()
        assert not await waiter.acquire(blocking_timeout=0.3)
        assert 0.3 <= time.monotonic() - start < 1

        async def release_later() -> None:
            await asyncio.sleep(0.2)
            await holder.release()

        start = time.monotonic()
        releasing = asyncio.ensure_future(release_later())
        # Acquired in this task (not a task of its own, as gather would): its token
        # is this task's, for the release below.
        assert await waiter.acquire(blocking_timeout=5)
        assert 0.15 < time.monotonic() - start < 2
        await releasing
        await waiter.release()

    scenario(url, body)


def test_wrongmode(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        holder = Semaphore(r, "sem", 3, timeout=10)
        assert await holder.acquire(blocking=False)
        with pytest.raises(WrongMode) as raised:
            await Semaphore(r, "sem", 4, timeout=10).acquire(blocking_timeout=5)
        assert (raised.value.mode, raised.value.limit) == ("semaphore", 3)
        assert isinstance(raised.value, LockError)
        assert isinstance(raised.value, ResponseError)
        with pytest.raises(WrongMode):
            async with ReadWriteLock(r, "sem", timeout=10).read():
                pytest.fail("a reader on a semaphore")
        assert await holder.owned()
        await holder.release()

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


def test_arguments_are_checked(url: str) -> None:
    async def body(r: redis.asyncio.Redis) -> None:
        with pytest.raises(ValueError):
            Semaphore(r, "sem", 0, timeout=10)
        with pytest.raises(ValueError, match="needs a timeout"):
            Lock(r, "sem", shared=True)
        with pytest.raises(ValueError, match="needs a timeout"):
            ReadWriteLock(r, "sem", timeout=None)  # type: ignore[arg-type]

    scenario(url, body)
