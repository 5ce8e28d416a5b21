# Generated from tests/_async/test_guarded.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Guarded and fenced writes against a real server: ``lease.guard`` and
``lock.guard`` run a command only while the lock is held and raise ``LockLost``
(writing nothing) once it is not; ``fenced`` admits equal and higher fences and raises
``StaleFence`` with the mark's highest for lower ones; on a cluster both are routed by
their hash-tagged keys."""

from __future__ import annotations

import pytest
import redis
import redis.cluster
from redis.exceptions import (
    LockError,
    LockNotOwnedError,
    RedisClusterException,
    ResponseError,
)
from servers import Server

from fencelock import LockLost, Locks, StaleFence, fenced

from .helpers import drop_in, sleep

STOCK = "{sku}:stock"


def test_lease_guard_runs_only_while_held(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.lock("{sku}", ttl=30) as lease:
        assert lease.guard("SET", STOCK, 10) == b"OK"
        assert lease.guard("DECRBY", STOCK, 3) == 7
        assert lease.guard("GET", STOCK) == b"7"
    with pytest.raises(LockLost) as raised:
        lease.guard("SET", STOCK, 0)
    assert raised.value.key == "lock:{sku}"
    # Released by its holder: refused, but not reported as lost.
    assert not lease.lost.is_set()
    assert r.get(STOCK) == b"7"


def test_lease_guard_after_expiry_sets_lost_and_writes_nothing(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    lease = locks.acquire("{sku}", ttl=0.1)
    sleep(0.2)
    with pytest.raises(LockLost):
        lease.guard("SET", STOCK, 1)
    assert lease.lost.is_set()
    assert r.exists(STOCK) == 0
    # Another holder now: the old lease is still refused, the new one writes.
    newer = locks.acquire("{sku}", ttl=30)
    with pytest.raises(LockLost):
        lease.guard("SET", STOCK, 1)
    assert newer.guard("SET", STOCK, 2) == b"OK"
    assert r.get(STOCK) == b"2"


def test_guard_passes_the_commands_own_errors_and_replies(
    any_r: redis.Redis,
) -> None:
    lease = Locks(any_r).acquire("{sku}", ttl=30)
    any_r.set(STOCK, "many")
    with pytest.raises(ResponseError) as raised:
        lease.guard("INCR", STOCK)
    assert not isinstance(raised.value, LockError)
    assert not lease.lost.is_set()
    assert lease.guard("GET", STOCK) in (b"many", "many")
    with pytest.raises(TypeError):
        lease.guard()


def test_lock_guard(any_r: redis.Redis) -> None:
    lock = drop_in(any_r, "{sku}", timeout=0.2)
    with pytest.raises(LockError) as unlocked:
        lock.guard("SET", STOCK, 1)
    assert not isinstance(unlocked.value, LockLost)
    assert lock.acquire(blocking=False)
    assert lock.guard("INCRBY", STOCK, 5) == 5
    assert lock.guard("SET", STOCK, 5) in (b"OK", "OK")
    sleep(0.3)
    with pytest.raises(LockNotOwnedError) as raised:
        lock.guard("INCRBY", STOCK, 5)
    assert isinstance(raised.value, LockLost)
    assert raised.value.lock_name == "{sku}"
    assert any_r.get(STOCK) in (b"5", "5")


def test_fenced_admits_equal_and_higher_fences(r: redis.Redis) -> None:
    assert fenced(r, "mark:ledger", 41, "SET", "ledger", 100) == b"OK"
    assert fenced(r, "mark:ledger", 41, "APPEND", "ledger", 0) == 4
    assert fenced(r, "mark:ledger", 42, "APPEND", "ledger", 1) == 5
    with pytest.raises(StaleFence) as raised:
        fenced(r, "mark:ledger", 40, "SET", "ledger", 0)
    assert (raised.value.highest, raised.value.fence) == (42, 40)
    assert raised.value.mark == "mark:ledger"
    assert isinstance(raised.value, LockError)
    assert r.get("ledger") == b"10001"
    # The inner command's own errors are not taken for a stale fence.
    with pytest.raises(ResponseError) as error:
        fenced(r, "mark:ledger", 42, "INCR", "ledger:missing", "extra")
    assert not isinstance(error.value, StaleFence)


def test_fenced_with_the_fences_of_successive_holders(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    first = locks.acquire("res", ttl=30)
    locks.release(first)
    second = locks.acquire("res", ttl=30)
    assert fenced(r, "mark:res", second.fence, "SET", "res", "second") == b"OK"
    with pytest.raises(StaleFence) as raised:
        fenced(r, "mark:res", first.fence, "SET", "res", "first")
    assert raised.value.highest == second.fence
    assert r.get("res") == b"second"


# Tags whose slots are spread over the three masters.
TAGS = ["{a}", "{b}", "{c}", "{sku}"]


def test_cluster_routes_guards_and_fences_by_their_keys(
    cluster: list[Server],
) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    client.ping()  # the asyncio client learns the slots on its first command
    nodes = [client.get_node_from_key(tag) for tag in TAGS]
    assert len({node.name for node in nodes if node is not None}) > 1
    locks = Locks(client)
    for tag in TAGS:
        with locks.lock(tag, ttl=30) as lease:
            assert lease.guard("SET", f"{tag}:stock", 3) is not None
            assert lease.guard("DECR", f"{tag}:stock") == 2
            # Keys in another slot: refused before anything runs.
            with pytest.raises((RedisClusterException, ResponseError)):
                lease.guard("SET", "elsewhere", 1)
        with pytest.raises(LockLost):
            lease.guard("SET", f"{tag}:stock", 0)
        assert fenced(client, f"{tag}:mark", 7, "INCR", f"{tag}:stock") == 3
        with pytest.raises(StaleFence) as raised:
            fenced(client, f"{tag}:mark", 6, "INCR", f"{tag}:stock")
        assert raised.value.highest == 7
        assert client.get(f"{tag}:stock") == b"3"
        client.delete(f"{tag}:stock", f"{tag}:mark")
    assert client.exists("elsewhere") == 0
    client.close()
