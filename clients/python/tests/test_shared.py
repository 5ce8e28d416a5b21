"""``fencelock.Semaphore`` and ``fencelock.ReadWriteLock`` (sync) against a real server:
permits and readers together, busy and FIFO waiting across modes, per-holder leases,
``WRONGMODE`` as ``WrongMode``, ``LOCK.INFO``'s new fields; and the pure parts (the
arguments sent, the parsing of replies)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError, ResponseError
from servers import Server, wait_until

import fencelock
from fencelock import Lock, ReadWriteLock, Semaphore, WrongMode, lock_info
from fencelock._protocol import acquire_args, wrong_mode
from fencelock.info import no_permit_free, parse_info


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


class Waiter(threading.Thread):
    """Acquires ``lock`` (blocking) in a thread of its own and holds it until
    ``leave`` is set; ``granted`` is set once it holds (``result`` says whether)."""

    def __init__(self, lock: Lock, order: list[str], name: str) -> None:
        super().__init__(daemon=True)
        self.lock = lock
        self.order = order
        self.label = name
        self.granted = threading.Event()
        self.leave = threading.Event()
        self.result: Any = None
        self.fence: Any = None

    def run(self) -> None:
        try:
            self.result = self.lock.acquire(blocking_timeout=10)
            self.fence = self.lock.fence
            self.order.append(self.label)
        except Exception as error:
            self.result = error
        self.granted.set()
        if self.result is True:
            self.leave.wait(10)
            self.lock.release()


# --- the arguments and replies, without a server ------------------------------------


def test_the_mode_is_sent_as_shared_or_limit() -> None:
    assert acquire_args("k", 10, "t", None) == ("LOCK.ACQUIRE", "k", 10, "TOKEN", "t")
    assert acquire_args("k", 10, "t", 5, shared=True)[-3:] == ("BLOCK", 5, "SHARED")
    # LIMIT implies SHARED: only LIMIT is sent.
    assert acquire_args("k", 10, "t", None, shared=True, limit=3)[-2:] == ("LIMIT", 3)
    assert "SHARED" not in acquire_args("k", 10, "t", None, limit=3)


def test_wrongmode_replies_are_parsed_from_their_end() -> None:
    def parsed(text: str) -> Any:
        return wrong_mode(ResponseError(text))

    assert parsed("WRONGMODE lock:x is a semaphore with limit 5") == ("semaphore", 5)
    assert parsed("WRONGMODE this is a key is held shared") == ("shared", None)
    assert parsed("WRONGMODE k is held exclusively") == ("exclusive", None)
    assert parsed("WRONGMODE something new") == (None, None)
    assert parsed("WRONGTYPE Operation against a key") is None
    assert parsed("ERR invalid limit") is None


def test_lock_info_of_a_module_without_shared_holders() -> None:
    old = [b"held", 1, b"fence", 7, b"ttl-ms", 900, b"waiters", 2]
    assert parse_info(old) == {
        "held": True,
        "fence": 7,
        "ttl_ms": 900,
        "waiters": 2,
        "mode": "exclusive",
        "holders": 1,
        "limit": None,
        "waiters_exclusive": 2,
        "waiters_shared": 0,
        "in_session": 0,
        "value": None,
    }


def test_no_permit_free() -> None:
    base: Any = {"held": True, "waiters": 0, "mode": "semaphore", "limit": 3}
    assert not no_permit_free(None, 3)
    assert not no_permit_free({**base, "holders": 2}, 3)
    assert no_permit_free({**base, "holders": 3}, 3)
    assert no_permit_free({**base, "holders": 2, "limit": 2}, 5), "the key's limit"
    assert no_permit_free({**base, "holders": 1, "waiters": 1}, 3), "FIFO"
    assert no_permit_free({**base, "holders": 1, "mode": "exclusive"}, 3)
    quarantined = {**base, "held": False, "holders": 0, "mode": "quarantined"}
    assert no_permit_free(quarantined, 3), "how many permits it keeps: unknown"


def test_arguments_are_checked_before_anything_is_sent(r: redis.Redis) -> None:
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
    assert [p.acquire(blocking=False) for p in permits] == [True, True, True, False]
    fences = [p.fence for p in permits[:3]]
    assert fences == sorted(fences) and len(set(fences)) == 3
    assert all(p.owned() for p in permits[:3]) and not permits[3].owned()
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


def test_context_manager_extend_reacquire_and_guard(r: redis.Redis) -> None:
    other = Semaphore(r, "sem", 2, timeout=60)
    assert other.acquire(blocking=False)
    with Semaphore(r, "sem", 2, timeout=10, blocking_timeout=1) as permit:
        assert isinstance(permit, Semaphore)
        assert permit.owned()
        assert permit.extend(5)
        assert permit.extend(10, replace_ttl=True)
        assert permit.reacquire()
        assert permit.guard("SET", "guarded", "yes") == b"OK"
        with (
            pytest.raises(LockError, match="Unable to acquire"),
            Semaphore(r, "sem", 2, timeout=10, blocking_timeout=0.1),
        ):
            pytest.fail("a third permit of two")
    assert r.get("guarded") == b"yes"
    assert not permit.owned() and other.owned()
    other.release()


def test_a_permit_waits_for_the_first_freed_one(r: redis.Redis) -> None:
    held = [Semaphore(r, "sem", 2, timeout=10, thread_local=False) for _ in range(2)]
    assert all(p.acquire(blocking=False) for p in held)
    waiter = Semaphore(r, "sem", 2, timeout=10)
    start = time.monotonic()
    assert not waiter.acquire(blocking_timeout=0.3)
    assert 0.3 <= time.monotonic() - start < 1
    threading.Timer(0.2, held[1].release).start()
    start = time.monotonic()
    assert waiter.acquire(blocking_timeout=5)
    assert 0.15 < time.monotonic() - start < 2
    assert holders(r, "sem") == 2
    waiter.release()
    held[0].release()


def test_permits_are_granted_in_arrival_order(r: redis.Redis) -> None:
    held = [Semaphore(r, "sem", 2, timeout=30, thread_local=False) for _ in range(2)]
    assert all(p.acquire(blocking=False) for p in held)
    order: list[str] = []
    queued = []
    for count, name in enumerate("abc", start=1):
        waiter = Waiter(Semaphore(r, "sem", 2, timeout=30), order, name)
        waiter.start()
        wait_until(lambda c=count: waiters(r, "sem") == c, 5, "queued")
        queued.append(waiter)
    assert info(r, "sem")["waiters_shared"] == 3
    held[0].release()
    assert queued[0].granted.wait(5)
    assert not queued[1].granted.is_set()
    held[1].release()
    assert queued[1].granted.wait(5)
    queued[0].leave.set()
    assert queued[2].granted.wait(5)
    assert order == ["a", "b", "c"]
    for waiter in queued:
        waiter.leave.set()
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


def test_threads_share_a_semaphore_object(r: redis.Redis) -> None:
    permits = Semaphore(r, "sem", 3, timeout=10)
    inside = threading.Barrier(3, timeout=5)
    fences: list[Any] = []

    def work() -> None:
        with permits:
            inside.wait()  # all three hold at once
            fences.append(permits.fence)
            inside.wait()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(set(fences)) == 3
    assert r.exists("sem") == 0


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


def test_wrongmode_on_readers_and_on_a_token_held_exclusively(r: redis.Redis) -> None:
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


def test_a_limit_above_max_holders_is_the_servers_error(own_server: Server) -> None:
    client = own_server.client()
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
    assert all(rw.read().acquire(blocking=False) for rw in locks)
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
    assert info(any_r, "cfg")["mode"] == "exclusive"
    assert not locks[2].read().acquire(blocking=False), "a writer holds it"
    locks[1].write().release()
    assert any_r.exists("cfg") == 0


def test_a_writer_waits_for_every_reader(r: redis.Redis) -> None:
    readers = [ReadWriteLock(r, "cfg", timeout=10).read() for _ in range(2)]
    assert all(reader.acquire(blocking=False) for reader in readers)
    order: list[str] = []
    writer = Waiter(ReadWriteLock(r, "cfg", timeout=10).write(), order, "w")
    writer.start()
    wait_until(lambda: waiters(r, "cfg") == 1, 5, "writer queued")
    assert info(r, "cfg")["waiters_exclusive"] == 1
    readers[0].release()
    time.sleep(0.2)
    assert not writer.granted.is_set(), "one reader still holds it"
    readers[1].release()
    assert writer.granted.wait(5) and writer.result is True
    assert writer.fence > max(reader.fence for reader in readers)  # type: ignore[type-var]
    writer.leave.set()
    writer.join(5)


def test_a_reader_does_not_overtake_a_queued_writer(r: redis.Redis) -> None:
    first = ReadWriteLock(r, "cfg", timeout=10).read()
    assert first.acquire(blocking=False)
    order: list[str] = []
    writer = Waiter(ReadWriteLock(r, "cfg", timeout=10).write(), order, "writer")
    writer.start()
    wait_until(lambda: waiters(r, "cfg") == 1, 5, "writer queued")
    late = ReadWriteLock(r, "cfg", timeout=10).read()
    assert not late.acquire(blocking=False), "it would fit, but a writer waits"
    readers = [
        Waiter(ReadWriteLock(r, "cfg", timeout=10).read(), order, f"reader{i}")
        for i in range(3)
    ]
    for count, reader in enumerate(readers, start=2):
        reader.start()
        wait_until(lambda c=count: waiters(r, "cfg") == c, 5, "reader queued")
    found = info(r, "cfg")
    assert (found["waiters_exclusive"], found["waiters_shared"]) == (1, 3)
    first.release()
    assert writer.granted.wait(5)
    time.sleep(0.2)
    assert not any(reader.granted.is_set() for reader in readers)
    writer.leave.set()
    # The readers queued behind the writer are granted together, in one step.
    for reader in readers:
        assert reader.granted.wait(5) and reader.result is True
    assert holders(r, "cfg") == 3
    assert order[0] == "writer" and sorted(order[1:]) == [
        "reader0",
        "reader1",
        "reader2",
    ]
    assert all(reader.fence > writer.fence for reader in readers)
    for reader in readers:
        reader.leave.set()
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


def test_a_queued_waiter_in_the_wrong_mode_gets_wrongmode(r: redis.Redis) -> None:
    writer = Lock(r, "k", timeout=10, thread_local=False)
    assert writer.acquire(blocking=False)
    order: list[str] = []
    first = Waiter(Semaphore(r, "k", 2, timeout=10), order, "sem2")
    first.start()
    wait_until(lambda: waiters(r, "k") == 1, 5, "queued")
    second = Waiter(Semaphore(r, "k", 3, timeout=10), order, "sem3")
    second.start()
    wait_until(lambda: waiters(r, "k") == 2, 5, "queued")
    writer.release()
    assert first.granted.wait(5) and first.result is True
    assert second.granted.wait(5)
    assert isinstance(second.result, WrongMode)
    assert (second.result.mode, second.result.limit) == ("semaphore", 2)
    first.leave.set()
    first.join(5)


def test_readers_in_threads_share_the_read_lock(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "cfg", timeout=10)
    all_in = threading.Barrier(4, timeout=5)
    leave = threading.Event()

    def read() -> None:
        with rw.read():
            all_in.wait()
            leave.wait(5)

    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    all_in.wait()
    assert holders(r, "cfg") == 3
    assert not rw.write().acquire(blocking=False)
    leave.set()
    for thread in threads:
        thread.join(10)
    assert rw.write().acquire(blocking=False)
    rw.write().release()


def test_lock_info_of_an_exclusive_lock(r: redis.Redis) -> None:
    assert lock_info(r, "none") is None
    lock = Lock(r, "x", timeout=10)
    assert lock.acquire(blocking=False)
    found = info(r, "x")
    assert (found["mode"], found["holders"], found["limit"]) == ("exclusive", 1, None)
    assert (found["waiters_exclusive"], found["waiters_shared"]) == (0, 0)
    lock.release()
