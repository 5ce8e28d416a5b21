"""The one refresher of a ``fencelock.Locks``: a daemon thread that keeps every lease
of the manager alive and watches every deadline, on the schedule of
``fencelock._schedule``. Leases due together are refreshed in one pipelined write per
server, each read bounded by the time left to the earliest deadline, so a server that
hangs cannot keep the thread from reporting a lease lost at its deadline. The thread
starts with the first lease and ends when none has been left for ``LINGER`` seconds
(a job that takes locks in a loop keeps one thread, not one per lock). Refreshes go
over a connection of the thread's own per server, never a pooled one that waiters may
have taken. Written by hand
(``fencelock._async._refresher`` is the task twin): this is where a thread and a task
really differ."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict
from typing import Any, Callable, Optional

from .._protocol import parse_flag, refresh_args, to_ms
from .._schedule import Schedule
from .._servers import node_of
from ._compat import dedicated
from ._connection import pipelined
from .lease import Lease

log = logging.getLogger("fencelock")

MAX_READ = 5.0
MIN_READ = 0.05
# How long the thread waits for a new lease before it ends.
LINGER = 2.0


def thread_name(client: Any) -> str:
    """Names the thread after the client it refreshes for, as it shows in dumps."""
    return f"fencelock-refresher-{id(client):x}"


class Refresher:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._schedule = Schedule()
        self._changed = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        # Leases the thread is working on outside the lock (refresh, loss report).
        self._busy: set[int] = set()
        # When the waiting thread will look next (monotonic), None: not waiting.
        self._planned: Optional[float] = None
        # Per server: the refresher's own connection; ``_io`` is held while one is
        # used (by the thread's refreshes, or a caller's release).
        self._connections: dict[Any, Any] = {}
        self._io = threading.Lock()

    def add(self, lease: Lease, refresh: bool) -> None:
        with self._changed:
            self._schedule.add(lease, refresh, lease.acquired_at)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=thread_name(self.client), daemon=True
                )
                self._thread.start()
            # Woken only if the new lease is due before the thread would look anyway.
            wakeup, planned = self._schedule.next_wakeup(), self._planned
            if planned is not None and wakeup is not None and wakeup < planned:
                self._changed.notify_all()

    def remove(self, lease: Lease) -> None:
        """Stops refreshing and watching ``lease``; returns once nothing is in flight
        for it, so no refresh can arrive after the release that follows."""
        with self._changed:
            self._schedule.remove(lease)
            if not len(self._schedule):
                self._changed.notify_all()  # the linger starts now
            while id(lease) in self._busy:
                self._changed.wait()

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                if not len(self._schedule):
                    if not self._idle_for(LINGER):
                        self._thread = None
                        self._close()
                        return
                    continue
                lost = self._schedule.expired(now)
                batch = self._schedule.due(now)
                if not lost and not batch:
                    wakeup = self._schedule.next_wakeup()
                    self._wait_until(now + LINGER if wakeup is None else wakeup)
                    continue
                self._busy.update(id(lease) for lease in lost + batch)
                read_bound = self._schedule.earliest_deadline()
            try:
                for lease in lost:
                    lease.report_lost()
                if batch:
                    self._refresh(batch, read_bound)
            except Exception:
                log.exception("fencelock: refresher failed")
            finally:
                with self._changed:
                    self._busy.difference_update(id(lease) for lease in lost + batch)
                    self._changed.notify_all()

    def _wait_until(self, when: float) -> None:
        self._planned = when
        try:
            self._changed.wait(max(0.0, when - time.monotonic()))
        finally:
            self._planned = None

    def _idle_for(self, seconds: float) -> bool:
        """Waits up to ``seconds`` for a lease; whether one came."""
        deadline = time.monotonic() + seconds
        while not len(self._schedule):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._wait_until(time.monotonic() + left)
        return True

    def _refresh(self, batch: list[Lease], read_bound: Optional[float]) -> None:
        by_server: dict[Any, list[Lease]] = defaultdict(list)
        for lease in batch:
            by_server[node_of(self.client, lease.key)].append(lease)
        for node, leases in by_server.items():
            self._refresh_on(node, leases, read_bound)

    def _close(self) -> None:
        with self._io:
            connections, self._connections = self._connections, {}
        for connection in connections.values():
            with contextlib.suppress(Exception):
                connection.disconnect()

    def _own(self, node: Any, key: Any) -> Any:
        # Called with ``_io`` held.
        if node not in self._connections:
            self._connections[node] = dedicated(self.client, key)
        return self._connections[node]

    def on_own_connection(self, key: Any, work: Callable[[Any], None]) -> None:
        """Runs ``work`` on the refresher's own connection to ``key``'s server, when no
        refresh is using it."""
        with self._io:
            connection = self._own(node_of(self.client, key), key)
            connection.connect()
            work(connection)

    def _refresh_on(
        self, node: Any, leases: list[Lease], read_bound: Optional[float]
    ) -> None:
        with self._io:
            lost = self._refresh_locked(
                self._own(node, leases[0].key), leases, read_bound
            )
        # Outside the connection's lock: an on_lost callback may release a lock.
        for lease in lost:
            lease.report_lost(found_gone=True)

    def _refresh_locked(
        self, connection: Any, leases: list[Lease], read_bound: Optional[float]
    ) -> list[Lease]:
        """Refreshes ``leases`` on ``connection``; the ones found lost."""
        sent = time.monotonic()
        earliest = min(lease.deadline for lease in leases)
        if read_bound is not None:
            earliest = min(earliest, read_bound)
        timeout = min(MAX_READ, max(MIN_READ, earliest - sent))
        commands = [refresh_args(one.key, one.token, to_ms(one.ttl)) for one in leases]
        lost: list[Lease] = []
        try:
            replies: list[Any] = pipelined(connection, commands, timeout)
        except Exception as error:
            log.warning("fencelock: refresh failed: %s", error)
            replies = [error] * len(leases)
        for lease, reply in zip(leases, replies):
            if isinstance(reply, Exception):
                with self._changed:
                    self._schedule.done(lease, sent, None)
                continue
            held = parse_flag(reply)
            if held:
                lease.confirmed(sent, lease.ttl)
            with self._changed:
                self._schedule.done(lease, sent, held)
            if not held:
                lost.append(lease)
        return lost
