"""What a lease does the asyncio way, written by hand rather than generated from
tests/_async/test_leases.py because threads have no twin of it: one refresher task
for all leases of a manager (counted among the loop's tasks), the run-once decorator
with callers gathered as tasks, ``ensure_held`` called or awaited, ``cancel_on_lost``
and cancellation around a block, the write lock's token per task. The threads' own is
tests/test_leases.py."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from conftest import async_client, run

import fencelock
import fencelock.asyncio
from fencelock import LockLost, LockNotAcquired


def test_asyncio_once(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        ran: list[str] = []

        @locks.once("nightly", ttl=10)
        async def job(name: str) -> str:
            ran.append(name)
            await asyncio.sleep(0.2)
            return name

        results = await asyncio.gather(job("a"), job("b"), job("c"))
        assert sorted(map(str, results)) == ["None", "None", ran[0]]
        assert len(ran) == 1
        await client.aclose()

    run(main())


def test_asyncio_cancel_on_lost_cancels_the_block_and_raises_lock_lost(
    url: str,
) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        reached_end = False
        with pytest.raises(LockLost):
            async with locks.lock("cancel-me", ttl=0.3, cancel_on_lost=True):
                await client.delete("lock:cancel-me")
                await asyncio.sleep(5)
                reached_end = True
        assert not reached_end
        task = asyncio.current_task()
        assert task is not None
        cancelling = getattr(task, "cancelling", lambda: 0)
        assert cancelling() == 0, "our own cancellation is withdrawn"
        # The task goes on normally afterwards.
        await asyncio.sleep(0.01)

        # With lost_ok the block is cut short quietly.
        async with locks.lock(
            "cancel-ok", ttl=0.3, cancel_on_lost=True, lost_ok=True
        ) as lease:
            await client.delete("lock:cancel-ok")
            await asyncio.sleep(5)
        assert lease.lost.is_set()
        await client.aclose()

    start = time.monotonic()
    run(main())
    assert time.monotonic() - start < 3


def test_asyncio_ensure_held_works_called_or_awaited(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        async with locks.lock("checked", ttl=10, lost_ok=True) as lease:
            lease.ensure_held()
            await lease.ensure_held()
            await lease.ensure_held(check=True)
            await client.delete("lock:checked")
            lease.ensure_held()  # the clock still says held
            with pytest.raises(LockLost):
                await lease.ensure_held(check=True)
            with pytest.raises(LockLost):
                lease.ensure_held()
        await client.aclose()

    run(main())


def test_asyncio_one_refresher_task_for_many_leases(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        async with contextlib.AsyncExitStack() as stack:
            leases = [
                await stack.enter_async_context(locks.lock(f"m:{i}", ttl=0.3))
                for i in range(50)
            ]
            before = len(asyncio.all_tasks())
            await asyncio.sleep(0.7)
            for lease in leases:
                fence = await client.execute_command(
                    "LOCK.FENCE", lease.key, lease.token
                )
                assert fence == lease.fence and not lease.lost.is_set()
            # One scheduler task (plus the batches in flight on a busy machine: 7 was
            # seen), not one per lease (50).
            assert before <= 10
        await client.aclose()

    run(main())


def test_cancelling_around_the_block_leaks_no_lock(url: str) -> None:
    """``wait_for`` cancelling at every point of acquire, block and leaving: after
    100 runs nothing is held."""

    async def main() -> None:
        client = async_client(url, socket_timeout=5)
        locks = fencelock.asyncio.Locks(client)
        holder = await locks.acquire("raced", ttl=30)

        async def use() -> None:
            async with locks.lock("raced", ttl=5, wait=1):
                await asyncio.sleep(0.001)

        async def release_soon() -> None:
            await asyncio.sleep(0.05)
            await locks.release(holder)

        await release_soon()
        for attempt in range(100):
            with contextlib.suppress(asyncio.TimeoutError, LockNotAcquired):
                await asyncio.wait_for(use(), timeout=0.0005 * (attempt % 20))
        await asyncio.sleep(0.2)  # shielded releases still in flight
        assert await client.exists("lock:raced") == 0
        await client.aclose()

    run(main())


def test_asyncio_writer_tokens_per_task(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        rw = fencelock.asyncio.ReadWriteLock(client, "cfg", timeout=30)
        order: list[str] = []

        async def writer(name: str) -> None:
            async with rw.write():
                order.append(f"{name} in")
                await asyncio.sleep(0.1)
                order.append(f"{name} out")

        await asyncio.gather(writer("a"), writer("b"))
        # Each task held the write lock with its own token, one after the other.
        assert order in (
            ["a in", "a out", "b in", "b out"],
            ["b in", "b out", "a in", "a out"],
        )
        assert await client.exists("cfg") == 0
        await client.aclose()

    run(main())


def test_the_refresher_task_lingers_from_its_last_lease_not_its_first(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acquire-release cycles faster than the task wakes keep one refresher task
    (and its connection) for as long as they go on: the linger counts from when the
    last lease left. The task used to count from when it first saw none, and ended
    mid-run once the cycles outlasted the linger."""
    from fencelock._async import _refresher

    monkeypatch.setattr(_refresher, "LINGER", 0.3)

    async def main() -> None:
        client = async_client(url)
        locks = fencelock.asyncio.Locks(client)
        async with locks.lock("linger", ttl=10):
            pass
        first = locks._refresher._task
        assert first is not None
        ended = time.monotonic() + 1.0
        while time.monotonic() < ended:
            async with locks.lock("linger", ttl=10):
                pass
            await asyncio.sleep(0.02)
        assert locks._refresher._task is first, "one task through the cycles"
        assert not first.done()
        await asyncio.sleep(0.6)
        assert first.done(), "ended once nothing was left for the linger"
        await locks.aclose()
        await client.aclose()

    run(main())
