"""The one refresher of a ``fencelock.asyncio.Locks``: a task that keeps every lease
of the manager alive and watches every deadline, on the schedule of
``fencelock._schedule``. Leases due together are refreshed in one pipelined write per
server; each batch and each loss report runs as a task of its own, so a server that
hangs delays neither the other servers' refreshes nor the report of a lease whose
deadline passes meanwhile. Refreshes go over a connection of the refresher's own per
server (one batch at a time on it), never a pooled one that waiters may have taken.
Written by hand (``fencelock._sync._refresher`` is the thread twin): this is where a
task and a thread really differ.

The leases of a session (``Locks(session=True)``) are kept alive by the session's one
heartbeat instead: when any of them is due, one ``LOCK.KEEPALIVE name ttl`` goes to
each server that owns the key of one of them *now* (a cluster node, by the client's
slot map: a holding moved by a migration is found on its new node), and its answer
settles every lease of the session there at once (``_keep_alive``).

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

from redis.exceptions import ConnectionError, TimeoutError

from .._protocol import (
    as_bytes,
    fence_args,
    held_args,
    keepalive_args,
    parse_flag,
    parse_held,
    refresh_args,
    release_args,
    to_ms,
)
from .._schedule import Schedule
from .._servers import is_cluster, node_of
from .._session import Sessions
from ._commands import call
from ._compat import dedicated
from ._connection import pipelined
from .lease import Lease, lease_end

log = logging.getLogger("fencelock")

# A refresh batch's replies may take no longer than this, nor than the time left to
# the earliest deadline it could still save.
MAX_READ = 5.0
MIN_READ = 0.05
# How long the task waits for a new lease before it ends (a job that takes locks in a
# loop keeps one task, and its connections, not one per lock).
LINGER = 2.0
# How long ``stop_if_idle`` waits for the task to end: a keepalive in flight and the
# ``LOCK.HELD`` that may follow it, each read bounded by ``MAX_READ``.
STOP_WAIT = 2 * MAX_READ


class Refresher:
    def __init__(self, client: Any, sessions: Optional[Sessions] = None) -> None:
        self.client = client
        self.sessions = sessions
        self._schedule = Schedule()
        # ``stop_if_idle``: end now, not after the linger.
        self._stop = False
        self._task: Optional[asyncio.Task[None]] = None
        self._wake: Optional[asyncio.Event] = None
        # The tasks working on a lease (a refresh batch, a loss report).
        self._busy: dict[int, set[asyncio.Task[None]]] = defaultdict(set)
        # When the waiting task will look next (monotonic), None: not waiting.
        self._planned: Optional[float] = None
        # When the last lease left (monotonic): the linger counts from there, also
        # when leases came and went while the task slept.
        self._emptied_at = 0.0
        # Per server: the refresher's own connection, and who uses it now.
        self._connections: dict[Any, tuple[Any, asyncio.Lock]] = {}

    def after_fork(self) -> None:
        """In the child of a fork, for a manager never used in the parent (one that
        was is refused in the child: ``Locks._after_fork``): nothing watched, no
        task, no connection."""
        self._schedule = Schedule()
        self._stop = False
        self._task = None
        self._wake = None
        self._busy = defaultdict(set)
        self._planned = None
        self._emptied_at = 0.0
        self._connections = {}

    def add(self, lease: Lease, refresh: bool) -> None:
        # A lease of a session is watched from its grant on (``Locks.acquire``): a
        # block that holds it later keeps that entry.
        if lease.session is not None and (
            lease in self._schedule or not self._session_holds(lease)
        ):
            return
        self._schedule.add(lease, refresh, lease.acquired_at)
        self._stop = False
        task = self._task
        if task is None or task.done() or task.get_loop() is not _running_loop():
            self._wake = asyncio.Event()
            self._planned = None
            self._task = asyncio.ensure_future(self._run(self._wake))
        self._wake_if_due_earlier()

    async def remove(self, lease: Lease) -> None:
        """Stops refreshing and watching ``lease``; returns once nothing is in flight
        for it, so no refresh can arrive after the release that follows."""
        self.forget(lease)
        while self._busy.get(id(lease)):
            await asyncio.wait(set(self._busy[id(lease)]))
        self._busy.pop(id(lease), None)

    def forget(self, lease: Lease) -> None:
        """Stops refreshing and watching ``lease`` (and counting it in its session's
        keepalives) at once, without waiting for what is in flight."""
        self._schedule.remove(lease)
        if lease.session is not None and self.sessions is not None:
            self.sessions.leave(lease)
        if not len(self._schedule):
            self._emptied_at = time.monotonic()
            if self._wake is not None:
                self._wake.set()  # the linger starts now

    async def stop_if_idle(self) -> None:
        """Ends the task now, rather than after the linger, if nothing is watched
        (``Locks.aclose``), and returns once it has ended, its connections closed
        (as the threads' side waits for its thread), though no longer than
        ``STOP_WAIT``; a lease that comes meanwhile keeps it. A task of another
        event loop is left to that loop."""
        task = self._task
        if len(self._schedule) or task is None or self._wake is None:
            return
        self._stop = True
        self._wake.set()
        if task.get_loop() is not _running_loop():
            return
        until = time.monotonic() + STOP_WAIT
        while not task.done():
            left = until - time.monotonic()
            if left <= 0:
                log.warning(
                    "fencelock: the refresher task did not end within %s s", STOP_WAIT
                )
                return
            if task is self._task and len(self._schedule):
                return  # a new lease came: the task serves it
            await asyncio.wait({task}, timeout=min(left, 0.1))

    def _session_holds(self, lease: Lease) -> bool:
        return self.sessions is not None and self.sessions.holds(lease)

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
                if idle_since is None:
                    idle_since = now
                idle_since = max(idle_since, self._emptied_at)
                if self._stop or now - idle_since >= LINGER:
                    return
                await self._sleep_until(wake, idle_since + LINGER)
                continue
            idle_since = None
            lost = self._expired(now)
            if lost:
                self._spawn(lost, _report_all(lost))
            batch = self._schedule.due(now)
            if batch:
                batch = self._with_session_siblings(batch)
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

    def _node_of(self, key: Any) -> Any:
        return node_of(self.client, key)

    def _expired(self, now: float) -> list[Lease]:
        """The leases whose deadline has passed, with the other leases of their
        sessions on the same servers; no longer watched."""
        lost: list[Lease] = []
        seen: set[int] = set()
        for lease in self._schedule.expired(now):
            for one in (lease, *self._lost_with(lease)):
                if id(one) not in seen:
                    seen.add(id(one))
                    lost.append(one)
        return lost

    def _lost_with(self, lease: Lease) -> list[Lease]:
        """A lease of a session whose deadline passed takes the session on its server
        with it: its other leases there (no longer watched, their deadline the
        session's); the manager's new acquires take a new session name."""
        if lease.session is None or self.sessions is None:
            return []
        node = self._node_of(lease.key)
        siblings = self.sessions.members(lease.session, node, self._node_of)
        self.sessions.leave(lease)
        self.sessions.lost_on(lease.session)
        lost = []
        for other in siblings:
            if other is lease:
                continue
            self._schedule.remove(other)
            self.sessions.leave(other)
            other.deadline = min(other.deadline, lease.deadline)
            lost.append(other)
        return lost

    def _with_session_siblings(self, batch: list[Lease]) -> list[Lease]:
        """A due lease of a session brings its session's other leases on the same
        server along: one keepalive refreshes them all."""
        if self.sessions is None:
            return batch
        groups: set[tuple[str, Any]] = set()
        for lease in batch:
            if lease.session is not None:
                groups.add((lease.session, self._node_of(lease.key)))
        more = []
        for name, node in groups:
            for lease in self.sessions.members(name, node, self._node_of):
                if self._schedule.take(lease):
                    more.append(lease)
        return batch + more

    async def _refresh(self, batch: list[Lease]) -> None:
        by_server: dict[Any, list[Lease]] = defaultdict(list)
        by_session: dict[tuple[str, Any], list[Lease]] = defaultdict(list)
        for lease in batch:
            node = self._node_of(lease.key)
            if lease.session is None:
                by_server[node].append(lease)
            else:
                by_session[(lease.session, node)].append(lease)
        await asyncio.gather(
            *(self._refresh_on(node, group) for node, group in by_server.items()),
            *(
                self._keep_alive(name, node, group)
                for (name, node), group in by_session.items()
            ),
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

    async def _keep_alive(self, name: str, node: Any, taken: list[Lease]) -> None:
        """One ``LOCK.KEEPALIVE`` of session ``name`` to ``node``, for every lease of
        the session there (``taken``: the ones this batch settles), after any release
        of the session that failed before (so that the keepalive cannot keep it
        alive). Its answer is the number of holdings it kept: all of them, and each
        lease there is confirmed; 0, and all are lost; another number, and
        ``LOCK.HELD`` says which are still held (``_settle_session``)."""
        sessions = self.sessions
        assert sessions is not None
        connection, in_use = self._own(node, taken[0].key)
        async with in_use:
            members = sessions.members(name, node, self._node_of)
            if not members:  # released, or elsewhere now: looked at again soon
                for lease in taken:
                    self._schedule.done(lease, time.monotonic(), None)
                return
            pending = sessions.take_pending(name, node, self._node_of)
            commands = [release_args(key, token) for key, token in pending]
            kept_ms = sessions.keepalive_ms(name)
            commands.append(keepalive_args(name, kept_ms))
            sent = time.monotonic()
            # A keepalive may shorten a lease (``session_ttl`` below the lock's
            # ttl): whatever its answer, the lease ends no later than this now.
            for lease in members:
                lease.deadline = min(lease.deadline, lease_end(sent, kept_ms / 1000))
            earliest = min(lease.deadline for lease in members)
            timeout = min(MAX_READ, max(MIN_READ, earliest - sent))
            held = None
            try:
                replies: list[Any] = await pipelined(connection, commands, timeout)
                if isinstance(replies[-1], Exception):
                    raise replies[-1]
                kept = int(replies[-1])
                if members and kept not in (0, len(members)):
                    (reply,) = await pipelined(connection, [held_args(name)], timeout)
                    if isinstance(reply, Exception):
                        raise reply
                    held = parse_held(reply)
            except Exception as error:
                log.warning("fencelock: keepalive failed: %s", error)
                if not isinstance(error, (ConnectionError, TimeoutError, OSError)):
                    pending = []  # answered: an error reply is an answer
                sessions.give_back(name, pending)
                for lease in taken:
                    self._schedule.done(lease, sent, None)
                return
        await self._settle_session(
            name, members, taken, kept, held, sent, kept_ms / 1000
        )

    async def _settle_session(
        self,
        name: str,
        members: list[Lease],
        taken: list[Lease],
        kept: int,
        held: Optional[set[tuple[bytes, int]]],
        sent: float,
        ttl: float,
    ) -> None:
        sessions = self.sessions
        assert sessions is not None
        if kept == len(members):
            confirmed, missing = members, []
        elif held is None:  # kept nothing: the session holds nothing there
            confirmed, missing = [], members
        else:
            confirmed = [m for m in members if (as_bytes(m.key), m.fence) in held]
            found = {id(m) for m in confirmed}
            missing = [m for m in members if id(m) not in found]
        moved = {id(m) for m in await self._moved(missing)}
        mine = {id(m) for m in taken}
        for lease in confirmed:
            if not sessions.holds(lease):
                continue  # released meanwhile
            lease.confirmed(sent, ttl)
            if id(lease) in mine:
                self._schedule.done(lease, sent, True, ttl)
        settled = {id(m) for m in confirmed}
        for lease in taken:
            if id(lease) not in settled:
                retry = id(lease) in moved
                self._schedule.done(lease, sent, None if retry else False)
        lost = [m for m in missing if id(m) not in moved and sessions.holds(m)]
        if kept == 0 and lost:
            sessions.lost_on(name)
        for lease in lost:
            self._schedule.remove(lease)
            sessions.leave(lease)
        for lease in lost:
            await lease.report_lost(found_gone=True)

    async def _moved(self, missing: list[Lease]) -> list[Lease]:
        """Of the leases a cluster node no longer has, the ones still held (a slot
        migration moved them, with their session): asked through the client, which
        follows ``MOVED`` and so learns where their keys are now. Tried again soon,
        their keepalive then goes to the new node."""
        if not missing or not is_cluster(self.client):
            return []
        moved = []
        for lease in missing:
            try:
                fence = await call(
                    self.client, lease.key, *fence_args(lease.key, lease.token)
                )
            except Exception as error:
                log.warning("fencelock: could not look for %r: %s", lease.key, error)
                moved.append(lease)  # unknown: not lost yet, its deadline decides
                continue
            if fence is not None and int(fence) == lease.fence:
                moved.append(lease)
        return moved

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


async def _report_all(leases: list[Lease]) -> None:
    for lease in leases:
        await lease.report_lost()


def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()
