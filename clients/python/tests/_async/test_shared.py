"""``Semaphore`` and ``ReadWriteLock`` against a real server:
permits and readers together, busy and FIFO waiting across modes, per-holder leases,
``WRONGMODE`` as ``WrongMode``, ``LOCK.INFO``'s new fields; and the pure parts (the
arguments sent, the parsing of replies)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio
from redis.exceptions import LockError, LockNotOwnedError, ResponseError
from servers import Server

import fencelock._async._acquire
from fencelock.asyncio import Lock, ReadWriteLock, Semaphore, WrongMode, lock_info

from .helpers import Waiter, later, sleep, until


async def info(client: redis.asyncio.Redis, key: str) -> dict[str, Any]:
    found = await lock_info(client, key)
    assert found is not None, f"{key} is free"
    return dict(found)


async def waiters(client: redis.asyncio.Redis, key: str) -> int:
    found = await lock_info(client, key)
    return 0 if found is None else found["waiters"]


async def holders(client: redis.asyncio.Redis, key: str) -> int:
    found = await lock_info(client, key)
    return 0 if found is None else found["holders"]


async def test_arguments_are_checked_before_anything_is_sent(
    r: redis.asyncio.Redis,
) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Semaphore(r, "s", 0, timeout=10)
    with pytest.raises(TypeError):
        Semaphore(r, "s", "3", timeout=10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Semaphore(r, "s", True, timeout=10)
    with pytest.raises(ValueError, match="needs a timeout"):
        Semaphore(r, "s", 3, timeout=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a timeout"):
        Lock(r, "s", shared=True)
    with pytest.raises(ValueError, match="needs a timeout"):
        ReadWriteLock(r, "s", timeout=0)
    with pytest.raises(ValueError, match="needs a ttl"):
        await fencelock._async._acquire.acquire(
            r, "s", "t", ttl_ms=None, wait=0, shared=True
        )
    assert await r.exists("s") == 0


# --- Semaphore ----------------------------------------------------------------------


async def test_three_permits_then_busy(any_r: redis.asyncio.Redis) -> None:
    permits = [Semaphore(any_r, "sem", 3, timeout=10) for _ in range(4)]
    assert [await p.acquire(blocking=False) for p in permits] == [
        True,
        True,
        True,
        False,
    ]
    fences = [p.fence for p in permits[:3]]
    assert fences == sorted(fences) and len(set(fences)) == 3
    assert all([await p.owned() for p in permits[:3]]) and not await permits[3].owned()
    assert await any_r.type("sem") in (b"fencelock", "fencelock")
    found = await info(any_r, "sem")
    assert 9000 < found.pop("ttl_ms") <= 10_000
    assert found == {
        "held": True,
        "fence": fences[2],
        "waiters": 0,
        "mode": "semaphore",
        "holders": 3,
        "limit": 3,
        "waiters_exclusive": 0,
        "waiters_shared": 0,
        "in_session": 0,
        "value": None,
        "state": None,
        "keep_ms": None,
        "result_size": None,
    }
    assert permits[0].mode == "semaphore" and permits[0].limit == 3
    await permits[1].release()
    assert not await permits[1].owned()
    assert await permits[3].acquire(blocking=False), "the freed permit"
    assert permits[3].fence is not None and permits[3].fence > fences[2]
    for p in (permits[0], permits[2], permits[3]):
        await p.release()
    assert await any_r.exists("sem") == 0, "no key left after the last holder"
    assert await lock_info(any_r, "sem") is None


async def test_locked_means_no_permit_is_free(r: redis.asyncio.Redis) -> None:
    first, second = (Semaphore(r, "sem", 2, timeout=10) for _ in range(2))
    assert await first.locked() is False
    assert await first.acquire(blocking=False)
    assert await first.locked() is False, "one of two permits is free"
    assert await second.acquire(blocking=False)
    assert await first.locked() is True and await second.locked() is True
    await second.release()
    await first.release()
    exclusive = Lock(r, "sem", timeout=10)
    assert await exclusive.acquire(blocking=False)
    assert await first.locked() is True
    await exclusive.release()
    await r.set("sem", "a plain value")
    assert await first.locked() is True
    assert not await first.acquire(blocking=False), "another type is busy, as for Lock"


async def test_context_manager_extend_reacquire_and_guard(
    r: redis.asyncio.Redis,
) -> None:
    other = Semaphore(r, "sem", 2, timeout=60)
    assert await other.acquire(blocking=False)
    async with Semaphore(r, "sem", 2, timeout=10, blocking_timeout=1) as permit:
        assert isinstance(permit, Semaphore)
        assert await permit.owned()
        assert await permit.extend(5)
        assert await permit.extend(10, replace_ttl=True)
        assert await permit.reacquire()
        assert await permit.guard("SET", "guarded", "yes") == b"OK"
        with pytest.raises(LockError, match="Unable to acquire"):
            async with Semaphore(r, "sem", 2, timeout=10, blocking_timeout=0.1):
                pytest.fail("a third permit of two")
    assert await r.get("guarded") == b"yes"
    assert not await permit.owned() and await other.owned()
    await other.release()


async def test_a_permit_waits_for_the_first_freed_one(r: redis.asyncio.Redis) -> None:
    held = [Semaphore(r, "sem", 2, timeout=10, thread_local=False) for _ in range(2)]
    assert all([await p.acquire(blocking=False) for p in held])
    waiter = Semaphore(r, "sem", 2, timeout=10)
    start = time.monotonic()
    assert not await waiter.acquire(blocking_timeout=0.3)
    assert 0.3 <= time.monotonic() - start < 1
    later(0.2, held[1].release)
    start = time.monotonic()
    assert await waiter.acquire(blocking_timeout=5)
    assert 0.15 < time.monotonic() - start < 2
    assert await holders(r, "sem") == 2
    await waiter.release()
    await held[0].release()


async def test_permits_are_granted_in_arrival_order(r: redis.asyncio.Redis) -> None:
    held = [Semaphore(r, "sem", 2, timeout=30, thread_local=False) for _ in range(2)]
    assert all([await p.acquire(blocking=False) for p in held])
    order: list[str] = []
    queued = []
    for count, name in enumerate("abc", start=1):
        waiter = Waiter(Semaphore(r, "sem", 2, timeout=30), order, name)
        waiter.start()

        async def arrived(c: int = count) -> bool:
            return await waiters(r, "sem") == c

        await until(arrived, 5, "queued")
        queued.append(waiter)
    assert (await info(r, "sem"))["waiters_shared"] == 3
    await held[0].release()
    assert await queued[0].granted(5)
    assert not queued[1].is_granted()
    await held[1].release()
    assert await queued[1].granted(5)
    queued[0].leave()
    assert await queued[2].granted(5)
    assert order == ["a", "b", "c"]
    for waiter in queued:
        waiter.leave()
        await waiter.join(5)
    assert await r.exists("sem") == 0


async def test_each_permit_has_a_lease_of_its_own(r: redis.asyncio.Redis) -> None:
    short = Semaphore(r, "sem", 2, timeout=0.3)
    long = Semaphore(r, "sem", 2, timeout=30)
    assert await short.acquire(blocking=False) and await long.acquire(blocking=False)
    assert not await Semaphore(r, "sem", 2, timeout=10).acquire(blocking=False)
    late = Semaphore(r, "sem", 2, timeout=10)
    start = time.monotonic()
    assert await late.acquire(blocking_timeout=5), "the short lease's permit came back"
    assert 0.2 < time.monotonic() - start < 2
    assert not await short.owned() and await long.owned() and await late.owned()
    with pytest.raises(LockNotOwnedError):
        await short.release()
    await long.release()
    await late.release()


async def test_the_same_token_again_is_the_same_permit(r: redis.asyncio.Redis) -> None:
    permit = Semaphore(r, "sem", 3, timeout=10)
    assert await permit.acquire(blocking=False, token="worker-1")
    fence = permit.fence
    assert await permit.acquire(blocking=False, token="worker-1")
    assert permit.fence == fence
    assert await holders(r, "sem") == 1
    await permit.release()


async def test_another_limit_is_wrongmode(r: redis.asyncio.Redis) -> None:
    holder = Semaphore(r, "sem", 3, timeout=10)
    assert await holder.acquire(blocking=False)
    for other in (
        Semaphore(r, "sem", 5, timeout=10),
        Lock(r, "sem", timeout=10, shared=True),
    ):
        start = time.monotonic()
        with pytest.raises(WrongMode) as raised:
            await other.acquire(blocking_timeout=5)
        assert time.monotonic() - start < 1, "refused, not queued"
        error = raised.value
        assert (error.mode, error.limit, error.key) == ("semaphore", 3, "sem")
        assert error.lock_name == "sem"
        assert str(error) == "WRONGMODE sem is a semaphore with limit 3"
        assert isinstance(error, LockError) and isinstance(error, ResponseError)
        assert not await other.owned()
    assert await holder.owned() and await holders(r, "sem") == 1, "nothing changed"
    await holder.release()


async def test_wrongmode_on_readers_and_on_a_token_held_exclusively(
    r: redis.asyncio.Redis,
) -> None:
    reader = Lock(r, "rw", timeout=10, shared=True)
    assert await reader.acquire(blocking=False)
    with pytest.raises(WrongMode) as raised:
        await Semaphore(r, "rw", 2, timeout=10).acquire(blocking=False)
    assert (raised.value.mode, raised.value.limit) == ("shared", None)
    await reader.release()

    writer = Lock(r, "x", timeout=10)
    assert await writer.acquire(blocking=False, token="t")
    # Another token: busy, as any exclusive holder makes it.
    assert not await Semaphore(r, "x", 2, timeout=10).acquire(blocking=False)
    # The holder's own token asking for a permit: no mode change.
    with pytest.raises(WrongMode) as raised:
        await Semaphore(r, "x", 2, timeout=10).acquire(blocking=False, token="t")
    assert raised.value.mode == "exclusive"
    assert await writer.owned(), "the exclusive holding is kept"
    await writer.release()


async def test_a_limit_above_max_holders_is_the_servers_error(
    own_server: Server,
) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url)
    await client.config_set("fencelock.max-holders", 4)
    with pytest.raises(ResponseError, match="invalid limit") as raised:
        await Semaphore(client, "sem", 5, timeout=10).acquire(blocking=False)
    assert not isinstance(raised.value, WrongMode)
    readers = [Lock(client, "rw", timeout=10, shared=True) for _ in range(5)]
    assert [await lock.acquire(blocking=False) for lock in readers] == [True] * 4 + [
        False
    ]
    await client.aclose()


# --- ReadWriteLock ------------------------------------------------------------------


async def test_readers_together_and_a_writer_alone(any_r: redis.asyncio.Redis) -> None:
    locks = [ReadWriteLock(any_r, "cfg", timeout=10) for _ in range(3)]
    assert locks[0].read() is locks[0].read()
    assert locks[0].read().mode == "shared" and locks[0].write().mode == "exclusive"
    assert all([await rw.read().acquire(blocking=False) for rw in locks])
    assert await locks[0].locked()
    found = await info(any_r, "cfg")
    assert (found["mode"], found["holders"], found["limit"]) == ("shared", 3, None)
    assert found["fence"] == max(rw.read().fence for rw in locks)  # type: ignore[type-var]
    writer = ReadWriteLock(any_r, "cfg", timeout=10).write()
    assert not await writer.acquire(blocking=False), "readers hold it"
    for rw in locks:
        await rw.read().release()
    assert not await locks[0].locked()
    assert await locks[1].write().acquire(blocking=False)
    assert (await info(any_r, "cfg"))["mode"] == "exclusive"
    assert not await locks[2].read().acquire(blocking=False), "a writer holds it"
    await locks[1].write().release()
    assert await any_r.exists("cfg") == 0


async def test_a_writer_waits_for_every_reader(r: redis.asyncio.Redis) -> None:
    readers = [ReadWriteLock(r, "cfg", timeout=10).read() for _ in range(2)]
    assert all([await reader.acquire(blocking=False) for reader in readers])
    order: list[str] = []
    writer = Waiter(ReadWriteLock(r, "cfg", timeout=10).write(), order, "w")
    writer.start()

    async def queued() -> bool:
        return await waiters(r, "cfg") == 1

    await until(queued, 5, "writer queued")
    assert (await info(r, "cfg"))["waiters_exclusive"] == 1
    await readers[0].release()
    await sleep(0.2)
    assert not writer.is_granted(), "one reader still holds it"
    await readers[1].release()
    assert await writer.granted(5) and writer.result is True
    assert writer.fence > max(reader.fence for reader in readers)  # type: ignore[type-var]
    writer.leave()
    await writer.join(5)


async def test_a_reader_does_not_overtake_a_queued_writer(
    r: redis.asyncio.Redis,
) -> None:
    first = ReadWriteLock(r, "cfg", timeout=10).read()
    assert await first.acquire(blocking=False)
    order: list[str] = []
    writer = Waiter(ReadWriteLock(r, "cfg", timeout=10).write(), order, "writer")
    writer.start()

    async def queued() -> bool:
        return await waiters(r, "cfg") == 1

    await until(queued, 5, "writer queued")
    late = ReadWriteLock(r, "cfg", timeout=10).read()
    assert not await late.acquire(blocking=False), "it would fit, but a writer waits"
    readers = [
        Waiter(ReadWriteLock(r, "cfg", timeout=10).read(), order, f"reader{i}")
        for i in range(3)
    ]
    for count, reader in enumerate(readers, start=2):
        reader.start()

        async def arrived(c: int = count) -> bool:
            return await waiters(r, "cfg") == c

        await until(arrived, 5, "reader queued")
    found = await info(r, "cfg")
    assert (found["waiters_exclusive"], found["waiters_shared"]) == (1, 3)
    await first.release()
    assert await writer.granted(5)
    await sleep(0.2)
    assert not any(reader.is_granted() for reader in readers)
    writer.leave()
    # The readers queued behind the writer are granted together, in one step.
    for reader in readers:
        assert await reader.granted(5) and reader.result is True
    assert await holders(r, "cfg") == 3
    assert order[0] == "writer" and sorted(order[1:]) == [
        "reader0",
        "reader1",
        "reader2",
    ]
    assert all([reader.fence > writer.fence for reader in readers])
    for reader in readers:
        reader.leave()
        await reader.join(5)
    assert await r.exists("cfg") == 0


async def test_no_upgrade_from_read_to_write(r: redis.asyncio.Redis) -> None:
    rw = ReadWriteLock(r, "cfg", timeout=10)
    assert await rw.read().acquire(blocking=False, token="me")
    with pytest.raises(WrongMode) as raised:
        await rw.write().acquire(blocking=False, token="me")
    assert raised.value.mode == "shared"
    assert await rw.read().owned()
    # Another token (of another object) only waits (here: not at all) for the reader.
    assert not await ReadWriteLock(r, "cfg", timeout=10).write().acquire(blocking=False)
    await rw.read().release()
    assert await rw.write().acquire(blocking=False, token="me")
    with pytest.raises(WrongMode) as raised:
        await rw.read().acquire(blocking=False, token="me")
    assert raised.value.mode == "exclusive"
    await rw.write().release()


async def test_a_queued_waiter_in_the_wrong_mode_gets_wrongmode(
    r: redis.asyncio.Redis,
) -> None:
    writer = Lock(r, "k", timeout=10, thread_local=False)
    assert await writer.acquire(blocking=False)
    order: list[str] = []
    first = Waiter(Semaphore(r, "k", 2, timeout=10), order, "sem2")
    first.start()

    async def queued() -> bool:
        return await waiters(r, "k") == 1

    await until(queued, 5, "queued")
    second = Waiter(Semaphore(r, "k", 3, timeout=10), order, "sem3")
    second.start()

    async def queued() -> bool:
        return await waiters(r, "k") == 2

    await until(queued, 5, "queued")
    await writer.release()
    assert await first.granted(5) and first.result is True
    assert await second.granted(5)
    assert isinstance(second.result, WrongMode)
    assert (second.result.mode, second.result.limit) == ("semaphore", 2)
    first.leave()
    await first.join(5)


async def test_lock_info_of_an_exclusive_lock(r: redis.asyncio.Redis) -> None:
    assert await lock_info(r, "none") is None
    lock = Lock(r, "x", timeout=10)
    assert await lock.acquire(blocking=False)
    found = await info(r, "x")
    assert (found["mode"], found["holders"], found["limit"]) == ("exclusive", 1, None)
    assert (found["waiters_exclusive"], found["waiters_shared"]) == (0, 0)
    await lock.release()
