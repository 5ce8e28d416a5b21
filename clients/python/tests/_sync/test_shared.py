# Generated from tests/_async/test_shared.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""``Semaphore`` and ``ReadWriteLock`` against a real server:
permits and readers together, busy and FIFO waiting across modes, per-holder leases,
``WRONGMODE`` as ``WrongMode``, ``LOCK.INFO``'s new fields; and the pure parts (the
arguments sent, the parsing of replies)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError, ResponseError
from servers import Server

import fencelock._sync._acquire
from fencelock import Lock, ReadWriteLock, Semaphore, WrongMode, lock_info

from .helpers import Waiter, later, sleep, until


def info(client: redis.Redis, key: str) -> dict[str, Any]:
    found = lock_info(client, key)
    assert found is not None, f"{key} is free"
    return dict(found)


def waiters(client: redis.Redis, key: str) -> int:
    found = lock_info(client, key)
    return 0 if found is None else found["waiters"]


def holders(client: redis.Redis, key: str) -> int:
    found = lock_info(client, key)
    return 0 if found is None else found["holders"]


def test_arguments_are_checked_before_anything_is_sent(
    r: redis.Redis,
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
        fencelock._sync._acquire.acquire(r, "s", "t", ttl_ms=None, wait=0, shared=True)
    assert r.exists("s") == 0


# --- Semaphore ----------------------------------------------------------------------


def test_three_permits_then_busy(any_r: redis.Redis) -> None:
    permits = [Semaphore(any_r, "sem", 3, timeout=10) for _ in range(4)]
    assert [p.acquire(blocking=False) for p in permits] == [
        True,
        True,
        True,
        False,
    ]
    fences = [p.fence for p in permits[:3]]
    assert fences == sorted(fences) and len(set(fences)) == 3
    assert all([p.owned() for p in permits[:3]]) and not permits[3].owned()
    assert any_r.type("sem") in (b"fencelock", "fencelock")
    found = info(any_r, "sem")
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
    permits[1].release()
    assert not permits[1].owned()
    assert permits[3].acquire(blocking=False), "the freed permit"
    assert permits[3].fence is not None and permits[3].fence > fences[2]
    for p in (permits[0], permits[2], permits[3]):
        p.release()
    assert any_r.exists("sem") == 0, "no key left after the last holder"
    assert lock_info(any_r, "sem") is None


def test_locked_means_no_permit_is_free(r: redis.Redis) -> None:
    first, second = (Semaphore(r, "sem", 2, timeout=10) for _ in range(2))
    assert first.locked() is False
    assert first.acquire(blocking=False)
    assert first.locked() is False, "one of two permits is free"
    assert second.acquire(blocking=False)
    assert first.locked() is True and second.locked() is True
    second.release()
    first.release()
    exclusive = Lock(r, "sem", timeout=10)
    assert exclusive.acquire(blocking=False)
    assert first.locked() is True
    exclusive.release()
    r.set("sem", "a plain value")
    assert first.locked() is True
    assert not first.acquire(blocking=False), "another type is busy, as for Lock"


def test_context_manager_extend_reacquire_and_guard(
    r: redis.Redis,
) -> None:
    other = Semaphore(r, "sem", 2, timeout=60)
    assert other.acquire(blocking=False)
    with Semaphore(r, "sem", 2, timeout=10, blocking_timeout=1) as permit:
        assert isinstance(permit, Semaphore)
        assert permit.owned()
        assert permit.extend(5)
        assert permit.extend(10, replace_ttl=True)
        assert permit.reacquire()
        assert permit.guard("SET", "guarded", "yes") == b"OK"
        with pytest.raises(LockError, match="Unable to acquire"):
            with Semaphore(r, "sem", 2, timeout=10, blocking_timeout=0.1):
                pytest.fail("a third permit of two")
    assert r.get("guarded") == b"yes"
    assert not permit.owned() and other.owned()
    other.release()


def test_a_permit_waits_for_the_first_freed_one(r: redis.Redis) -> None:
    held = [Semaphore(r, "sem", 2, timeout=10, thread_local=False) for _ in range(2)]
    assert all([p.acquire(blocking=False) for p in held])
    waiter = Semaphore(r, "sem", 2, timeout=10)
    start = time.monotonic()
    assert not waiter.acquire(blocking_timeout=0.3)
    assert 0.3 <= time.monotonic() - start < 1
    later(0.2, held[1].release)
    start = time.monotonic()
    assert waiter.acquire(blocking_timeout=5)
    assert 0.15 < time.monotonic() - start < 2
    assert holders(r, "sem") == 2
    waiter.release()
    held[0].release()


def test_permits_are_granted_in_arrival_order(r: redis.Redis) -> None:
    held = [Semaphore(r, "sem", 2, timeout=30, thread_local=False) for _ in range(2)]
    assert all([p.acquire(blocking=False) for p in held])
    order: list[str] = []
    queued = []
    for count, name in enumerate("abc", start=1):
        waiter = Waiter(Semaphore(r, "sem", 2, timeout=30), order, name)
        waiter.start()

        def arrived(c: int = count) -> bool:
            return waiters(r, "sem") == c

        until(arrived, 5, "queued")
        queued.append(waiter)
    assert (info(r, "sem"))["waiters_shared"] == 3
    held[0].release()
    assert queued[0].granted(5)
    assert not queued[1].is_granted()
    held[1].release()
    assert queued[1].granted(5)
    queued[0].leave()
    assert queued[2].granted(5)
    assert order == ["a", "b", "c"]
    for waiter in queued:
        waiter.leave()
        waiter.join(5)
    assert r.exists("sem") == 0


def test_each_permit_has_a_lease_of_its_own(r: redis.Redis) -> None:
    short = Semaphore(r, "sem", 2, timeout=0.3)
    long = Semaphore(r, "sem", 2, timeout=30)
    assert short.acquire(blocking=False) and long.acquire(blocking=False)
    assert not Semaphore(r, "sem", 2, timeout=10).acquire(blocking=False)
    late = Semaphore(r, "sem", 2, timeout=10)
    start = time.monotonic()
    assert late.acquire(blocking_timeout=5), "the short lease's permit came back"
    assert 0.2 < time.monotonic() - start < 2
    assert not short.owned() and long.owned() and late.owned()
    with pytest.raises(LockNotOwnedError):
        short.release()
    long.release()
    late.release()


def test_the_same_token_again_is_the_same_permit(r: redis.Redis) -> None:
    permit = Semaphore(r, "sem", 3, timeout=10)
    assert permit.acquire(blocking=False, token="worker-1")
    fence = permit.fence
    assert permit.acquire(blocking=False, token="worker-1")
    assert permit.fence == fence
    assert holders(r, "sem") == 1
    permit.release()


def test_another_limit_is_wrongmode(r: redis.Redis) -> None:
    holder = Semaphore(r, "sem", 3, timeout=10)
    assert holder.acquire(blocking=False)
    for other in (
        Semaphore(r, "sem", 5, timeout=10),
        Lock(r, "sem", timeout=10, shared=True),
    ):
        start = time.monotonic()
        with pytest.raises(WrongMode) as raised:
            other.acquire(blocking_timeout=5)
        assert time.monotonic() - start < 1, "refused, not queued"
        error = raised.value
        assert (error.mode, error.limit, error.key) == ("semaphore", 3, "sem")
        assert error.lock_name == "sem"
        assert str(error) == "WRONGMODE sem is a semaphore with limit 3"
        assert isinstance(error, LockError) and isinstance(error, ResponseError)
        assert not other.owned()
    assert holder.owned() and holders(r, "sem") == 1, "nothing changed"
    holder.release()


def test_wrongmode_on_readers_and_on_a_token_held_exclusively(
    r: redis.Redis,
) -> None:
    reader = Lock(r, "rw", timeout=10, shared=True)
    assert reader.acquire(blocking=False)
    with pytest.raises(WrongMode) as raised:
        Semaphore(r, "rw", 2, timeout=10).acquire(blocking=False)
    assert (raised.value.mode, raised.value.limit) == ("shared", None)
    reader.release()

    writer = Lock(r, "x", timeout=10)
    assert writer.acquire(blocking=False, token="t")
    # Another token: busy, as any exclusive holder makes it.
    assert not Semaphore(r, "x", 2, timeout=10).acquire(blocking=False)
    # The holder's own token asking for a permit: no mode change.
    with pytest.raises(WrongMode) as raised:
        Semaphore(r, "x", 2, timeout=10).acquire(blocking=False, token="t")
    assert raised.value.mode == "exclusive"
    assert writer.owned(), "the exclusive holding is kept"
    writer.release()


def test_a_limit_above_max_holders_is_the_servers_error(
    own_server: Server,
) -> None:
    client = redis.Redis.from_url(own_server.url)
    client.config_set("fencelock.max-holders", 4)
    with pytest.raises(ResponseError, match="invalid limit") as raised:
        Semaphore(client, "sem", 5, timeout=10).acquire(blocking=False)
    assert not isinstance(raised.value, WrongMode)
    readers = [Lock(client, "rw", timeout=10, shared=True) for _ in range(5)]
    assert [lock.acquire(blocking=False) for lock in readers] == [True] * 4 + [False]
    client.close()


# --- ReadWriteLock ------------------------------------------------------------------


def test_readers_together_and_a_writer_alone(any_r: redis.Redis) -> None:
    locks = [ReadWriteLock(any_r, "cfg", timeout=10) for _ in range(3)]
    assert locks[0].read() is locks[0].read()
    assert locks[0].read().mode == "shared" and locks[0].write().mode == "exclusive"
    assert all([rw.read().acquire(blocking=False) for rw in locks])
    assert locks[0].locked()
    found = info(any_r, "cfg")
    assert (found["mode"], found["holders"], found["limit"]) == ("shared", 3, None)
    assert found["fence"] == max(rw.read().fence for rw in locks)  # type: ignore[type-var]
    writer = ReadWriteLock(any_r, "cfg", timeout=10).write()
    assert not writer.acquire(blocking=False), "readers hold it"
    for rw in locks:
        rw.read().release()
    assert not locks[0].locked()
    assert locks[1].write().acquire(blocking=False)
    assert (info(any_r, "cfg"))["mode"] == "exclusive"
    assert not locks[2].read().acquire(blocking=False), "a writer holds it"
    locks[1].write().release()
    assert any_r.exists("cfg") == 0


def test_a_writer_waits_for_every_reader(r: redis.Redis) -> None:
    readers = [ReadWriteLock(r, "cfg", timeout=10).read() for _ in range(2)]
    assert all([reader.acquire(blocking=False) for reader in readers])
    order: list[str] = []
    writer = Waiter(ReadWriteLock(r, "cfg", timeout=10).write(), order, "w")
    writer.start()

    def queued() -> bool:
        return waiters(r, "cfg") == 1

    until(queued, 5, "writer queued")
    assert (info(r, "cfg"))["waiters_exclusive"] == 1
    readers[0].release()
    sleep(0.2)
    assert not writer.is_granted(), "one reader still holds it"
    readers[1].release()
    assert writer.granted(5) and writer.result is True
    assert writer.fence > max(reader.fence for reader in readers)  # type: ignore[type-var]
    writer.leave()
    writer.join(5)


def test_a_reader_does_not_overtake_a_queued_writer(
    r: redis.Redis,
) -> None:
    first = ReadWriteLock(r, "cfg", timeout=10).read()
    assert first.acquire(blocking=False)
    order: list[str] = []
    writer = Waiter(ReadWriteLock(r, "cfg", timeout=10).write(), order, "writer")
    writer.start()

    def queued() -> bool:
        return waiters(r, "cfg") == 1

    until(queued, 5, "writer queued")
    late = ReadWriteLock(r, "cfg", timeout=10).read()
    assert not late.acquire(blocking=False), "it would fit, but a writer waits"
    readers = [
        Waiter(ReadWriteLock(r, "cfg", timeout=10).read(), order, f"reader{i}")
        for i in range(3)
    ]
    for count, reader in enumerate(readers, start=2):
        reader.start()

        def arrived(c: int = count) -> bool:
            return waiters(r, "cfg") == c

        until(arrived, 5, "reader queued")
    found = info(r, "cfg")
    assert (found["waiters_exclusive"], found["waiters_shared"]) == (1, 3)
    first.release()
    assert writer.granted(5)
    sleep(0.2)
    assert not any(reader.is_granted() for reader in readers)
    writer.leave()
    # The readers queued behind the writer are granted together, in one step.
    for reader in readers:
        assert reader.granted(5) and reader.result is True
    assert holders(r, "cfg") == 3
    assert order[0] == "writer" and sorted(order[1:]) == [
        "reader0",
        "reader1",
        "reader2",
    ]
    assert all([reader.fence > writer.fence for reader in readers])
    for reader in readers:
        reader.leave()
        reader.join(5)
    assert r.exists("cfg") == 0


def test_no_upgrade_from_read_to_write(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "cfg", timeout=10)
    assert rw.read().acquire(blocking=False, token="me")
    with pytest.raises(WrongMode) as raised:
        rw.write().acquire(blocking=False, token="me")
    assert raised.value.mode == "shared"
    assert rw.read().owned()
    # Another token (of another object) only waits (here: not at all) for the reader.
    assert not ReadWriteLock(r, "cfg", timeout=10).write().acquire(blocking=False)
    rw.read().release()
    assert rw.write().acquire(blocking=False, token="me")
    with pytest.raises(WrongMode) as raised:
        rw.read().acquire(blocking=False, token="me")
    assert raised.value.mode == "exclusive"
    rw.write().release()


def test_a_queued_waiter_in_the_wrong_mode_gets_wrongmode(
    r: redis.Redis,
) -> None:
    writer = Lock(r, "k", timeout=10, thread_local=False)
    assert writer.acquire(blocking=False)
    order: list[str] = []
    first = Waiter(Semaphore(r, "k", 2, timeout=10), order, "sem2")
    first.start()

    def queued() -> bool:
        return waiters(r, "k") == 1

    until(queued, 5, "queued")
    second = Waiter(Semaphore(r, "k", 3, timeout=10), order, "sem3")
    second.start()

    def queued() -> bool:
        return waiters(r, "k") == 2

    until(queued, 5, "queued")
    writer.release()
    assert first.granted(5) and first.result is True
    assert second.granted(5)
    assert isinstance(second.result, WrongMode)
    assert (second.result.mode, second.result.limit) == ("semaphore", 2)
    first.leave()
    first.join(5)


def test_lock_info_of_an_exclusive_lock(r: redis.Redis) -> None:
    assert lock_info(r, "none") is None
    lock = Lock(r, "x", timeout=10)
    assert lock.acquire(blocking=False)
    found = info(r, "x")
    assert (found["mode"], found["holders"], found["limit"]) == ("exclusive", 1, None)
    assert (found["waiters_exclusive"], found["waiters_shared"]) == (0, 0)
    lock.release()
