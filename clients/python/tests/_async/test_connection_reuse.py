"""Uncontended acquire/release cycles with a wait allowed reuse the client's pooled
connection, and waiters sharing one client hold at most one pooled connection each:
counted by the server (connections it accepted), on a server of this file's own so
that no other test's client is counted. Through every other way to build a client:
tests/test_constructions.py."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Callable

import pytest
import redis.asyncio
from servers import Server
from setups import connections_received

import fencelock.asyncio

from .helpers import drop_in, join, spawn

CYCLES = 600
CONCURRENT = 4


@pytest.fixture(scope="module")
def counted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = Server(tmp_path_factory.mktemp("reuse"))
    yield started
    started.stop()


def new_connections(server: Server) -> Callable[[], int]:
    """A counter of the connections the server accepted since it was made (its own
    one included in the first count, made before)."""
    admin = redis.Redis(port=server.port)
    before = connections_received(admin)

    def count() -> int:
        total = connections_received(admin)
        admin.close()
        return total - before

    return count


@pytest.mark.parametrize("api", ["lock", "locks"])
async def test_uncontended_cycles_reuse_the_pooled_connection(
    counted_server: Server, api: str
) -> None:
    counted = new_connections(counted_server)
    client = redis.asyncio.Redis(
        host="127.0.0.1", port=counted_server.port, socket_timeout=5
    )
    if api == "lock":
        lock = drop_in(client, "reuse", timeout=30, blocking_timeout=10)
        for _ in range(CYCLES):
            assert await lock.acquire()
            await lock.release()
    else:
        locks = fencelock.asyncio.Locks(client)
        for _ in range(CYCLES):
            async with locks.lock("reuse", ttl=30, wait=10):
                pass
    await client.aclose()
    # The manager's refresher keeps one connection of its own besides.
    own = 1 if api == "locks" else 0
    assert counted() <= 1 + own, "one connection, reused by every cycle"


async def test_concurrent_cycles_use_a_connection_per_waiter(
    counted_server: Server,
) -> None:
    """Waiters (threads, or tasks) sharing one client each hold at most one pooled
    connection."""
    counted = new_connections(counted_server)
    client = redis.asyncio.Redis(
        host="127.0.0.1", port=counted_server.port, socket_timeout=5
    )
    locks = fencelock.asyncio.Locks(client)

    async def cycles(index: int) -> None:
        lock = drop_in(client, f"reuse-{index}", timeout=30, blocking_timeout=10)
        for _ in range(CYCLES // CONCURRENT):
            assert await lock.acquire()
            await lock.release()
            async with locks.lock(f"reuse-{index}", ttl=30, wait=10):
                pass

    started = [spawn(functools.partial(cycles, i)) for i in range(CONCURRENT)]
    for waiter, _ in started:
        await join(waiter, 60)
    await client.aclose()
    failures = [outcome["error"] for _, outcome in started if "error" in outcome]
    assert not failures, failures
    assert all("result" in outcome for _, outcome in started), "every waiter ended"
    assert counted() <= CONCURRENT + 1, "one per waiter, and the refresher's own"
