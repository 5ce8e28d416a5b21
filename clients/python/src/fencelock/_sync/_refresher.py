"""The one refresher of a ``fencelock.Locks``: a daemon thread that keeps every lease
of the manager alive and watches every deadline, on the schedule of
``fencelock._schedule``. Leases due together are refreshed in one pipelined write per
server, each read bounded by the time left to the earliest deadline, so a server that
hangs cannot keep the thread from reporting a lease lost at its deadline. The thread
starts with the first lease and ends when none has been left for ``LINGER`` seconds
(a job that takes locks in a loop keeps one thread, and its connections, not one per
lock), or at once at ``Locks.close()``, which returns once it has ended (a fork right
after it is a single-threaded process's). Refreshes go
over a connection of the thread's own per server, never a pooled one that waiters may
have taken. Written by hand
(``fencelock._async._refresher`` is the task twin): this is where a thread and a task
really differ.

The leases of a session are kept alive by its one heartbeat: when any is due, one
``LOCK.KEEPALIVE`` goes to each server that owns the key of one of them now, and its
answer settles all of them there (see the asyncio side)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections import defaultdict
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

MAX_READ = 5.0
MIN_READ = 0.05
# How long the thread waits for a new lease before it ends.
LINGER = 2.0
# How long ``stop_if_idle`` waits for the thread to end: a keepalive in flight and the
# ``LOCK.HELD`` that may follow it, each read bounded by ``MAX_READ``. A server that
# hangs longer (or an ``on_lost`` callback that does) cannot hang ``close()``.
STOP_WAIT = 2 * MAX_READ
# How long ``stop_if_idle`` waits for the kernel to drop the ended thread: some
# microseconds as a rule (see ``_kernel_thread_gone``).
KERNEL_THREAD_WAIT = 0.5
# Numbers the managers' refreshers of this process, for their threads' names.
_numbers = itertools.count(1)


def thread_name(client: Any) -> str:
    """A name for a new refresher's thread, as it shows in dumps: the client it
    refreshes for, then the refresher's number in this process (two managers on one
    client each have a thread of their own)."""
    return f"fencelock-refresher-{id(client):x}-{next(_numbers)}"


def _kernel_thread_gone(thread: threading.Thread) -> None:
    """Waits, briefly, until the kernel no longer lists the ended ``thread``. Before
    Python 3.13 ``join`` returns once the thread's Python part has ended, while the
    kernel's thread still unwinds for some microseconds; a fork then is counted as a
    multi-threaded process's (Python 3.12 reads that count to warn): about 2 forks
    in 100 of a loop of lock, ``close()``, fork, without this wait. Where the kernel
    lists a process's threads (Linux). Not for a thread running in this very OS
    thread (a gevent greenlet)."""
    native = thread.native_id
    if native is None or native == threading.get_native_id():
        return
    listed = f"/proc/self/task/{native}"
    until = time.monotonic() + KERNEL_THREAD_WAIT
    while os.path.exists(listed) and time.monotonic() < until:
        time.sleep(0.0005)


class Refresher:
    def __init__(self, client: Any, sessions: Optional[Sessions] = None) -> None:
        self.client = client
        self.sessions = sessions
        self._schedule = Schedule()
        # ``stop_if_idle``: end now, not after the linger.
        self._stop = False
        # ``_changed`` (a condition) and ``_io`` (a lock), made at their first use:
        # see ``_primitive``.
        self._primitives: dict[str, Any] = {}
        self.name = thread_name(client)
        # The thread serving now; None once it is ending (a lease that comes then
        # starts another).
        self._thread: Optional[threading.Thread] = None
        # The last thread started, still to be waited for at ``stop_if_idle`` while
        # it closes its connections after ``_thread`` was cleared.
        self._started: Optional[threading.Thread] = None
        # Leases the thread is working on outside the lock (refresh, loss report).
        self._busy: set[int] = set()
        # When the waiting thread will look next (monotonic), None: not waiting.
        self._planned: Optional[float] = None
        # When the last lease left (monotonic): the linger counts from there, also
        # when leases came and went while the thread slept.
        self._emptied_at = 0.0
        # Per server: the refresher's own connection; ``_io`` is held while one is
        # used (by the thread's refreshes, or a caller's release).
        self._connections: dict[Any, Any] = {}

    def after_fork(self) -> None:
        """In the child of a fork (``Locks._after_fork``): the leases watched so far
        are the parent's, whose thread keeps them alive; this process starts with
        none, no thread (one starts with its first lease) and no connection of its
        own (the parent's sockets stay the parent's: dropping them here only closes
        this process's copies). The lock and condition are made anew at their first
        use here: a thread that held them in the parent does not exist here, and a
        gevent worker monkey-patches ``threading`` after the fork (see
        ``_primitive``)."""
        self._schedule = Schedule()
        self._stop = False
        self._primitives = {}
        self._thread = None
        self._started = None
        self._busy = set()
        self._planned = None
        self._emptied_at = 0.0
        self._connections = {}

    @property
    def _changed(self) -> threading.Condition:
        """Held while the schedule is read or changed; notified when it changes."""
        return self._primitive("changed", threading.Condition)  # type: ignore[no-any-return]

    @property
    def _io(self) -> threading.Lock:
        """Held while one of the refresher's own connections is used."""
        return self._primitive("io", threading.Lock)  # type: ignore[no-any-return]

    def _primitive(self, name: str, make: Callable[[], Any]) -> Any:
        """The lock or condition ``name``, made at its first use. Made earlier (with
        the manager, or in the child at the fork) it could be of another kind than
        the thread that uses it: gunicorn's and Celery's gevent workers fork first and
        monkey-patch ``threading`` in the child afterwards. A condition made before
        the patch wraps an OS-thread lock, which every greenlet of the thread already
        owns: the refresher's greenlet takes it and gives it up in ``wait()``, and the
        greenlet that started it then fails to release it ("cannot release
        un-acquired lock"). Made at first use, it is of the kind the threads are by
        then. ``setdefault`` keeps one if two threads make it at once."""
        made = self._primitives.get(name)
        if made is None:
            made = self._primitives.setdefault(name, make())
        return made

    def add(self, lease: Lease, refresh: bool) -> None:
        with self._changed:
            # A lease of a session is watched from its grant on: a block that holds
            # it later keeps that entry.
            if lease.session is not None and (
                lease in self._schedule or not self._session_holds(lease)
            ):
                return
            self._schedule.add(lease, refresh, lease.acquired_at)
            self._stop = False
            if self._thread is None:
                self._thread = self._started = threading.Thread(
                    target=self._run, name=self.name, daemon=True
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
            self.forget(lease)
            while id(lease) in self._busy:
                self._changed.wait()

    def forget(self, lease: Lease) -> None:
        """Stops refreshing and watching ``lease`` (and counting it in its session's
        keepalives) at once, without waiting for what is in flight."""
        with self._changed:
            self._schedule.remove(lease)
            if lease.session is not None and self.sessions is not None:
                self.sessions.leave(lease)
            if not len(self._schedule):
                self._emptied_at = time.monotonic()
                self._changed.notify_all()  # the linger starts now

    def stop_if_idle(self) -> None:
        """Ends the thread now, rather than after the linger, if nothing is watched
        (``Locks.close``), and returns once it has ended, its connections closed: a
        fork right after ``close()`` is then a single-threaded process's (Python
        3.12 warns at a fork with threads). Not waited for from the thread itself (an
        ``on_lost`` callback that closes the manager: the thread ends after it), nor
        longer than ``STOP_WAIT``; a lease that comes meanwhile keeps it."""
        with self._changed:
            if len(self._schedule):
                return
            self._stop = True
            self._changed.notify_all()
            thread = self._started
        if thread is None or thread is threading.current_thread():
            return
        until = time.monotonic() + STOP_WAIT
        while thread.is_alive():
            left = until - time.monotonic()
            if left <= 0:
                log.warning(
                    "fencelock: the refresher thread %s did not end within %s s",
                    thread.name,
                    STOP_WAIT,
                )
                return
            with self._changed:
                if thread is self._thread and len(self._schedule):
                    return  # a new lease came: the thread serves it
            thread.join(min(left, 0.1))
        _kernel_thread_gone(thread)

    def _session_holds(self, lease: Lease) -> bool:
        return self.sessions is not None and self.sessions.holds(lease)

    def _run(self) -> None:
        while True:
            with self._changed:
                if not len(self._schedule):
                    if self._idle_for(LINGER):
                        continue
                    self._thread = None
                    self._stop = False
                    ending = True
                else:
                    ending = False
            if ending:
                # Outside ``_changed``: a caller may hold ``_io`` and want ``_changed``
                # (an ``on_lost`` that releases, during a release).
                self._close()
                return
            with self._changed:
                now = time.monotonic()
                lost = self._expired(now)
                batch = self._schedule.due(now)
                if batch:
                    batch = self._with_session_siblings(batch)
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
        """Waits for a lease until none has been watched for ``seconds``; whether one
        came. A lease that came and went meanwhile (without waking the thread: it
        was due later than the linger's end) starts the count again from when it
        left, so cycles that outlast the linger keep the thread and its connection."""
        idle_since = time.monotonic()
        while not len(self._schedule):
            idle_since = max(idle_since, self._emptied_at)
            left = idle_since + seconds - time.monotonic()
            if left <= 0 or self._stop:
                return False
            self._wait_until(time.monotonic() + left)
        return True

    def _node_of(self, key: Any) -> Any:
        return node_of(self.client, key)

    def _expired(self, now: float) -> list[Lease]:
        """The leases whose deadline has passed, with the other leases of their
        sessions on the same servers; no longer watched. Called with ``_changed``
        held."""
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
        with it (see the asyncio side). Called with ``_changed`` held."""
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
        server along. Called with ``_changed`` held."""
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

    def _refresh(self, batch: list[Lease], read_bound: Optional[float]) -> None:
        by_server: dict[Any, list[Lease]] = defaultdict(list)
        by_session: dict[tuple[str, Any], list[Lease]] = defaultdict(list)
        for lease in batch:
            node = self._node_of(lease.key)
            if lease.session is None:
                by_server[node].append(lease)
            else:
                by_session[(lease.session, node)].append(lease)
        for node, leases in by_server.items():
            self._refresh_on(node, leases, read_bound)
        for (name, node), leases in by_session.items():
            self._keep_alive(name, node, leases, read_bound)

    def _keep_alive(
        self, name: str, node: Any, taken: list[Lease], read_bound: Optional[float]
    ) -> None:
        """One ``LOCK.KEEPALIVE`` of session ``name`` to ``node`` for every lease of
        the session there, after the session's failed releases there (see the
        asyncio side)."""
        sessions = self.sessions
        assert sessions is not None
        with self._io:
            members = sessions.members(name, node, self._node_of)
            if not members:  # released, or elsewhere now: looked at again soon
                with self._changed:
                    for lease in taken:
                        self._schedule.done(lease, time.monotonic(), None)
                return
            pending = sessions.take_pending(name, node, self._node_of)
            commands = [release_args(key, token) for key, token in pending]
            kept_ms = sessions.keepalive_ms(name)
            commands.append(keepalive_args(name, kept_ms))
            connection = self._own(node, taken[0].key)
            sent = time.monotonic()
            # A keepalive may shorten a lease (``session_ttl`` below the lock's
            # ttl): whatever its answer, the lease ends no later than this now.
            for lease in members:
                lease.deadline = min(lease.deadline, lease_end(sent, kept_ms / 1000))
            earliest = min(lease.deadline for lease in members)
            if read_bound is not None:
                earliest = min(earliest, read_bound)
            timeout = min(MAX_READ, max(MIN_READ, earliest - sent))
            held = None
            try:
                replies: list[Any] = pipelined(connection, commands, timeout)
                if isinstance(replies[-1], Exception):
                    raise replies[-1]
                kept = int(replies[-1])
                if members and kept not in (0, len(members)):
                    (reply,) = pipelined(connection, [held_args(name)], timeout)
                    if isinstance(reply, Exception):
                        raise reply
                    held = parse_held(reply)
            except Exception as error:
                log.warning("fencelock: keepalive failed: %s", error)
                if not isinstance(error, (ConnectionError, TimeoutError, OSError)):
                    pending = []  # answered: an error reply is an answer
                sessions.give_back(name, pending)
                with self._changed:
                    for lease in taken:
                        self._schedule.done(lease, sent, None)
                return
        # Outside the connection's lock: an on_lost callback may release a lock.
        self._settle_session(name, members, taken, kept, held, sent, kept_ms / 1000)

    def _settle_session(
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
        moved = {id(m) for m in self._moved(missing)}
        mine = {id(m) for m in taken}
        settled = {id(m) for m in confirmed}
        with self._changed:
            for lease in confirmed:
                if not sessions.holds(lease):
                    continue  # released meanwhile
                lease.confirmed(sent, ttl)
                if id(lease) in mine:
                    self._schedule.done(lease, sent, True, ttl)
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
            lease.report_lost(found_gone=True)

    def _moved(self, missing: list[Lease]) -> list[Lease]:
        """Of the leases a cluster node no longer has, the ones a slot migration
        moved, still held (see the asyncio side)."""
        if not missing or not is_cluster(self.client):
            return []
        moved = []
        for lease in missing:
            try:
                fence = call(
                    self.client, lease.key, *fence_args(lease.key, lease.token)
                )
            except Exception as error:
                log.warning("fencelock: could not look for %r: %s", lease.key, error)
                moved.append(lease)  # unknown: not lost yet, its deadline decides
                continue
            if fence is not None and int(fence) == lease.fence:
                moved.append(lease)
        return moved

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
