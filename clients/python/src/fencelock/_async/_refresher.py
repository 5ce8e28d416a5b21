"""The one refresher of a ``fencelock.asyncio.Locks``: a task that keeps every lease
of the manager alive and watches every deadline, on the schedule of
``fencelock._schedule``. Leases due together are refreshed in one pipelined write per
server; each batch and each loss report runs as a task of its own, so a server that
hangs delays neither the other servers' refreshes nor the report of a lease whose
deadline passes meanwhile. Refreshes go over a connection of the refresher's own per
server (one batch at a time on it), never a pooled one that waiters may have taken.
Written by hand (``fencelock._sync._refresher`` is the thread twin): this is where a
task and a thread really differ.

Stopping does not trust ``Task.cancel()`` alone: on Python 3.11, ``asyncio.wait_for``
(which redis-py wraps around socket I/O when a timeout is set) can swallow a
cancellation that lands as the I/O completes. Nothing here is cancelled: the loop ends
by itself when no lease is left, and ``remove`` waits for what is in flight."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable
from typing import Any, Callable, Optional

from .._protocol import parse_flag, refresh_args, to_ms
from .._schedule import Schedule
from .._servers import node_of
from ._compat import dedicated
from ._connection import pipelined
from .lease import Lease

log = logging.getLogger("fencelock")

# A refresh batch's replies may take no longer than this, nor than the time left to
# the earliest deadline it could still save.
MAX_READ = 5.0
MIN_READ = 0.05
# How long the task waits for a new lease before it ends (a job that takes locks in a
# loop keeps one task, not one per lock).
LINGER = 2.0


class Refresher:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._schedule = Schedule()
        self._task: Optional[asyncio.Task[None]] = None
        self._wake: Optional[asyncio.Event] = None
        # The tasks working on a lease (a refresh batch, a loss report).
        self._busy: dict[int, set[asyncio.Task[None]]] = defaultdict(set)
        # When the waiting task will look next (monotonic), None: not waiting.
        self._planned: Optional[float] = None
        # Per server: the refresher's own connection, and who uses it now.
        self._connections: dict[Any, tuple[Any, asyncio.Lock]] = {}

    def add(self, lease: Lease, refresh: bool) -> None:
        self._schedule.add(lease, refresh, lease.acquired_at)
        task = self._task
        if task is None or task.done() or task.get_loop() is not _running_loop():
            self._wake = asyncio.Event()
            self._planned = None
            self._task = asyncio.ensure_future(self._run(self._wake))
        self._wake_if_due_earlier()

    async def remove(self, lease: Lease) -> None:
        """Stops refreshing and watching ``lease``; returns once nothing is in flight
        for it, so no refresh can arrive after the release that follows."""
        self._schedule.remove(lease)
        if not len(self._schedule) and self._wake is not None:
            self._wake.set()  # the linger starts now
        while self._busy.get(id(lease)):
            await asyncio.wait(set(self._busy[id(lease)]))
        self._busy.pop(id(lease), None)

    async def _run(self, wake: asyncio.Event) -> None:
        # Also when the loop shuts down and cancels the idle task (``asyncio.run``
        # ending): its own connections are closed, not left to the collector.
        try:
            await self._serve(wake)
        finally:
            await self._close()

    async def _serve(self, wake: asyncio.Event) -> None:
        idle_since: Optional[float] = None
        while True:
            now = time.monotonic()
            if not len(self._schedule):
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= LINGER:
                    return
                await self._sleep_until(wake, idle_since + LINGER)
                continue
            idle_since = None
            for lease in self._schedule.expired(now):
                self._spawn([lease], lease.report_lost())
            batch = self._schedule.due(now)
            if batch:
                self._spawn(batch, self._refresh(batch))
            wakeup = self._schedule.next_wakeup()
            await self._sleep_until(wake, now + LINGER if wakeup is None else wakeup)

    async def _sleep_until(self, wake: asyncio.Event, when: float) -> None:
        # A timer that sets the event, rather than ``wait_for``, which makes a task
        # per wait.
        self._planned = when
        timer = asyncio.get_running_loop().call_later(
            max(0.0, when - time.monotonic()), wake.set
        )
        try:
            await wake.wait()
        finally:
            timer.cancel()
            wake.clear()
            self._planned = None

    def _wake_if_due_earlier(self) -> None:
        """Wakes the waiting task if something is now due before it would look."""
        wakeup = self._schedule.next_wakeup()
        planned = self._planned
        if None in (self._wake, planned, wakeup):
            return
        if wakeup < planned:  # type: ignore[operator]
            self._wake.set()  # type: ignore[union-attr]

    def _spawn(self, leases: list[Lease], work: Any) -> None:
        task = asyncio.ensure_future(work)
        for lease in leases:
            self._busy[id(lease)].add(task)

        def finished(done: asyncio.Task[None]) -> None:
            for lease in leases:
                self._busy[id(lease)].discard(done)
            if not done.cancelled() and done.exception() is not None:
                log.error("fencelock: refresher failed", exc_info=done.exception())
            self._wake_if_due_earlier()

        task.add_done_callback(finished)

    async def _refresh(self, batch: list[Lease]) -> None:
        by_server: dict[Any, list[Lease]] = defaultdict(list)
        for lease in batch:
            by_server[node_of(self.client, lease.key)].append(lease)
        await asyncio.gather(
            *(self._refresh_on(node, group) for node, group in by_server.items())
        )

    async def _close(self) -> None:
        connections, self._connections = self._connections, {}
        for connection, _ in connections.values():
            with contextlib.suppress(Exception):
                await connection.disconnect()

    def _own(self, node: Any, key: Any) -> tuple[Any, asyncio.Lock]:
        if node not in self._connections:
            self._connections[node] = (dedicated(self.client, key), asyncio.Lock())
        return self._connections[node]

    async def on_own_connection(
        self, key: Any, work: Callable[[Any], Awaitable[None]]
    ) -> None:
        """Runs ``work`` on the refresher's own connection to ``key``'s server, when no
        refresh batch is using it."""
        connection, in_use = self._own(node_of(self.client, key), key)
        async with in_use:
            await connection.connect()
            await work(connection)

    async def _refresh_on(self, node: Any, leases: list[Lease]) -> None:
        connection, in_use = self._own(node, leases[0].key)
        commands = [refresh_args(one.key, one.token, to_ms(one.ttl)) for one in leases]
        async with in_use:
            sent = time.monotonic()
            earliest = min(lease.deadline for lease in leases)
            timeout = min(MAX_READ, max(MIN_READ, earliest - sent))
            try:
                replies: list[Any] = await pipelined(connection, commands, timeout)
            except Exception as error:
                log.warning("fencelock: refresh failed: %s", error)
                replies = [error] * len(leases)
        await self._settle(leases, replies, sent)

    async def _settle(
        self, leases: list[Lease], replies: list[Any], sent: float
    ) -> None:
        """The outcome of a batch sent at ``sent``: confirmed, refused (lost), or an
        error (tried again soon)."""
        for lease, reply in zip(leases, replies):
            if isinstance(reply, Exception):
                self._schedule.done(lease, sent, None)
                continue
            held = parse_flag(reply)
            if held:
                lease.confirmed(sent, lease.ttl)
            self._schedule.done(lease, sent, held)
            if not held:
                await lease.report_lost(found_gone=True)


def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()
