"""Leader election on asyncio (``fencelock.asyncio.Election``): what only tasks do.
A campaign is a coroutine asyncio's task factories take; cancellation — a cancelled
campaign leaves no place in the queue and no holding, a cancelled ``observe`` no
observer — and ``cancel_on_lost``; a sync client refused. What both sides do is
tests/_async/test_election.py (the sync side generated from it). Against a real
server."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Optional

import pytest
import redis
import redis.asyncio
from conftest import async_client, run
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

import fencelock
import fencelock.asyncio
from fencelock import Leader, LockLost, LockNotAcquired
from fencelock.asyncio import Election, Leadership


async def eventually(condition: Any, timeout: float = 5, what: str = "it") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def observing(client: Any) -> int:
    return sum(
        1
        for entry in await client.client_list()
        if entry.get("cmd") == "lock.observe" and "b" in entry.get("flags", "")
    )


def test_campaign_leader_proclaim_resign(url: str) -> None:
    async def main() -> None:
        client = async_client(url, decode_responses=True)
        election = Election(client, "async", ttl=10)
        assert await election.leader() is None
        leadership = await election.campaign("a")
        assert isinstance(leadership, Leadership)
        assert await election.leader() == Leader("a", leadership.fence)
        with pytest.raises(LockNotAcquired):
            await Election(client, "async", ttl=10).campaign("b", timeout=0)
        await leadership.proclaim("a2")
        assert await election.leader() == Leader("a2", leadership.fence)
        # A coroutine, as asyncio's task factories want one.
        waiting = asyncio.create_task(Election(client, "async", ttl=10).campaign("b"))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        assert await leadership.resign() is True
        second = await asyncio.wait_for(waiting, 5)
        assert second.fence > leadership.fence
        with pytest.raises(LockLost):
            leadership.ensure_held()
        with pytest.raises(LockNotAcquired):
            async with election.campaign("c", timeout=0.1):
                raise AssertionError("busy: the block does not run")
        await second.resign()
        await client.aclose()

    run(main())


def test_observe_yields_the_current_state_then_each_change(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        watcher = async_client(url, retry=Retry(NoBackoff(), 0))
        election = Election(client, "observed", ttl=10)
        seen: list[Optional[Leader]] = []
        changed = asyncio.Event()

        async def watch() -> None:
            async for state in Election(watcher, "observed", ttl=10).observe():
                seen.append(state)
                changed.set()

        async def next_state() -> Optional[Leader]:
            await asyncio.wait_for(changed.wait(), 5)
            changed.clear()
            return seen[-1]

        task = asyncio.ensure_future(watch())
        assert await next_state() is None
        leadership = await election.campaign("one")
        assert await next_state() == Leader(b"one", leadership.fence)
        await leadership.proclaim("two")
        assert await next_state() == Leader(b"two", leadership.fence)
        await eventually(lambda: observing(client), what="the observer to wait")
        await client.execute_command("CLIENT", "KILL", "TYPE", "normal")
        await leadership.proclaim("three")
        assert await next_state() == Leader(b"three", leadership.fence)
        await leadership.resign()
        assert await next_state() is None
        assert all(a != b for a, b in zip(seen, seen[1:])), "never twice in a row"

        # Cancelled while it waits: no observer is left on the server.
        await eventually(lambda: observing(client), what="the observer to wait")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

        async def gone() -> bool:
            return await observing(client) == 0

        await eventually(gone, what="the observer to leave")
        info = await client.info("fencelock")
        assert int(info.get("fencelock_observers", 0)) == 0
        await client.aclose()
        await watcher.aclose()

    run(main())


def test_a_cancelled_campaign_leaves_nothing_behind(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        election = Election(client, "cancelled", ttl=10)
        leader = await election.campaign("leader")
        waiting = asyncio.ensure_future(
            Election(client, "cancelled", ttl=10).campaign("w")
        )

        async def queued() -> bool:
            info = await fencelock.asyncio.lock_info(client, "lock:cancelled")
            return info is not None and info["waiters"] == 1

        await eventually(queued, what="the candidate to queue")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

        async def left() -> bool:
            info = await fencelock.asyncio.lock_info(client, "lock:cancelled")
            return info is not None and info["waiters"] == 0

        await eventually(left, what="the candidate to leave the queue")
        await leader.resign()
        assert await election.leader() is None, "nobody was handed the lock"

        # A timeout around a campaign: the same.
        leader = await election.campaign("leader")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(election.campaign("late"), 0.3)
        await eventually(left, what="the candidate to leave the queue")
        await leader.resign()
        assert await election.leader() is None
        await client.aclose()

    run(main())


def test_a_deleted_leadership_is_lost_and_cancel_on_lost(url: str) -> None:
    async def main() -> None:
        client = async_client(url)
        reported: list[Leadership] = []

        async def on_lost(leadership: Leadership) -> None:
            reported.append(leadership)

        election = Election(client, "lost", ttl=0.6)
        with pytest.raises(LockLost) as left:
            async with election.campaign("me", on_lost=on_lost) as leadership:
                await client.delete("lock:lost")
                await asyncio.wait_for(leadership.lost.wait(), 3)
        assert left.value.reason == LockLost.GONE
        assert reported == [leadership]

        reached = False
        with pytest.raises(LockLost):
            async with election.campaign("me", cancel_on_lost=True):
                await client.delete("lock:lost")
                await asyncio.sleep(5)
                reached = True
        assert not reached
        task = asyncio.current_task()
        assert task is not None
        assert getattr(task, "cancelling", lambda: 0)() == 0, "withdrawn"
        await client.aclose()

    run(main())


def test_a_sync_client_is_refused(r: redis.Redis) -> None:
    with pytest.raises(TypeError, match=r"fencelock\.Election"):
        Election(r, "x", ttl=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"fencelock\.asyncio\.Election"):
        fencelock.Election(redis.asyncio.Redis(), "x", ttl=1)  # type: ignore[arg-type]
