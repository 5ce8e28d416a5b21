"""``fencelock.asyncio.Election``: leader election on one lock, shaped like etcd's
(``fencelock.Election`` is its thread twin, generated from this file).

    election = Election(client, "scheduler", ttl=10)
    async with election.campaign("host-1:8080") as leadership:
        ...  # leads while the block runs: leadership.fence, ensure_held(), proclaim(v)
    print(await election.leader())  # Leader(value, fence), or None: nobody leads
    async for leader in election.observe():  # the current leader, then each change
        ...

A candidate's ``campaign(value)`` waits in the server's FIFO queue for the lock
(``LOCK.ACQUIRE key ttl TOKEN t BLOCK … VALUE value``) and leads once granted: its
``Leadership`` is a lease of a ``Locks`` manager, refreshed every ttl/3 by the
manager's refresher (or kept alive by the manager's session, with ``locks=``), its
loss reported as a lease's (``lost``, ``on_lost``, ``LockLost`` on leaving the block,
``cancel_on_lost``). Each leadership has a fence above every earlier one's: hand it
to what the leader writes (``fencelock.fenced``), so that a leader that was paused
past its lease is refused. ``proclaim(v)`` changes the leader's value
(``LOCK.PROCLAIM``), ``resign()`` releases the lock to the next candidate.

``leader()`` and ``observe()`` read ``LOCK.OBSERVE``, which never queues for the lock:
``observe`` answers the current state at once, then waits (``BLOCK``, a short wait at
a time) for any state that differs from the last one it saw, and after a lost
connection (a restart, ``CLIENT KILL``, a failover) asks again with that state, so
the new server answers at once if it differs: it may skip states that came and went
meanwhile, never the latest."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Callable, Optional

from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from .._election import (
    OBSERVE_BLOCK,
    OBSERVE_POLL,
    Leader,
    leader_of,
    passing,
    reconnect_pause,
)
from .._protocol import (
    Value,
    block_ms,
    observe_args,
    parse_flag,
    parse_observed,
    proclaim_args,
)
from ._commands import call, module_missing
from ._compat import (
    Checked,
    Entering,  # sync: # (threads: ``campaign`` returns the Leadership itself)
    Event,
    cancellations,
    check_client,
    entering,
    raise_if_cancel_swallowed,
    sleep,
)
from ._connection import command, exchange
from .lease import Lease
from .locks import Locks

if TYPE_CHECKING:
    from .._types import AsyncClient

log = logging.getLogger("fencelock")

OnLostLeadership = Callable[["Leadership"], Any]
# Not yet seen: ``observe`` yields its first state whatever it is.
_UNSEEN: Any = object()


class Election:
    """An election on the lock ``<prefix><name>``: candidates ``campaign``, one at a
    time leads, anyone reads who does (``leader``, ``observe``).

    ``ttl`` (seconds) is the leader's lease: refreshed every ttl/3 while it leads, so
    a leader that stops (a crash, a pause, a partition) is replaced about ttl after
    its last refresh. Without ``locks`` the election has a ``Locks`` of its own whose
    refresher keeps each leadership alive as a lease of its own; ``locks=manager``
    runs it in that manager (its key prefix, refresher and session: one keepalive for
    the leadership and the manager's other locks, ``aclose()`` ends them together);
    ``prefix`` is then the manager's."""

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        ttl: float,
        *,
        locks: Optional[Locks] = None,
        prefix: str = "lock:",
    ) -> None:
        check_client(client, "Election")
        if locks is not None and locks.client is not client:
            raise ValueError("locks must be a lock manager of the same client")
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        self.client = client
        self.name = name
        self.ttl = ttl
        self.locks = Locks(client, prefix, session=False) if locks is None else locks
        self._in_session = locks is not None
        self.key = self.locks.key(name)

    def __repr__(self) -> str:
        kind = type(self)
        return f"<{kind.__module__}.{kind.__qualname__} {self.key!r}>"

    def campaign(
        self,
        value: Value,
        timeout: Optional[float] = None,
        *,
        on_lost: Optional[OnLostLeadership] = None,
        lost_ok: bool = False,
        cancel_on_lost: bool = False,
    ) -> Entering[Leadership]:  # sync: ) -> Leadership:
        """Waits until this candidate leads, with ``value`` as its public value (a
        ``str`` or ``bytes``: what ``leader()`` and ``observe()`` show), and returns
        its ``Leadership``: leading from the grant on, refreshed while it leads,
        until ``resign()`` or leaving ``async with`` (which resigns). ``timeout``:
        None waits without limit, else seconds (0: one try); ``LockNotAcquired``
        when it ends first. ``on_lost(leadership)`` is called once if the
        leadership is lost; leaving the block after a loss raises ``LockLost``
        unless ``lost_ok``; ``cancel_on_lost`` (asyncio) cancels the task that
        campaigned when it is lost. A cancelled campaign leaves no place in the
        queue and holds nothing. Awaited, or entered at once: ``async with
        election.campaign(v) as leadership:``."""
        return entering(
            self._campaign(value, timeout, on_lost, lost_ok, cancel_on_lost)
        )

    async def _campaign(
        self,
        value: Value,
        timeout: Optional[float],
        on_lost: Optional[OnLostLeadership],
        lost_ok: bool,
        cancel_on_lost: bool,
    ) -> Leadership:
        lease = await self.locks.acquire(
            self.name,
            self.ttl,
            wait=timeout,
            session=self._in_session,
            # ``VALUE ""`` is no value: not sent.
            value=value or None,
        )
        leadership = Leadership(self, lease, value, lost_ok)
        leadership._hold(on_lost, cancel_on_lost)
        return leadership

    async def leader(self) -> Optional[Leader]:
        """The leader now, as ``Leader(value, fence)``, or None when nobody leads."""
        args = observe_args(self.key, None, None)
        observed = parse_observed(await call(self.client, self.key, *args))
        return None if observed is None else leader_of(observed)

    async def observe(self) -> AsyncIterator[Optional[Leader]]:
        """The leader (``Leader(value, fence)``, or None while nobody leads): the
        current one at once, then each time it changes — a new leader, a new value
        proclaimed, none — never the same state twice in a row. Ends only when the
        caller stops iterating. Between two answers it may skip states that came
        and went, never the latest: each request names the state last seen, and the
        server answers as soon as its own differs. A lost connection (a restart, a
        killed connection, a Sentinel failover) is retried after a pause that grows
        from 50 ms to 2 s per failure in a row (the client's own retry policy first,
        which also asks the Sentinels for the current master); the state is then
        asked again, so the server reached answers at once where it differs."""
        known: Optional[tuple[int, Any]] = None
        shown: Any = _UNSEEN
        failures = 0
        while True:
            try:
                observed, blocked = await self._observe(known)
            except (ConnectionError, TimeoutError, OSError, ResponseError) as error:
                if isinstance(error, ResponseError) and not passing(error):
                    raise
                failures += 1
                if failures == 1:
                    log.warning(
                        "fencelock: observing %r: %s; asking again", self.key, error
                    )
                await sleep(reconnect_pause(failures))
                continue
            if failures:
                log.info("fencelock: observing %r again", self.key)
                failures = 0
            if observed is None:
                if not blocked:
                    await sleep(OBSERVE_POLL)
                continue
            known = observed
            current = leader_of(observed)
            if shown is _UNSEEN or current != shown:
                shown = current
                yield current

    async def _observe(
        self, known: Optional[tuple[int, Any]]
    ) -> tuple[Optional[tuple[int, Any]], bool]:
        """One ``LOCK.OBSERVE``: the state, or None when none differed from
        ``known`` in time; and whether it waited (``BLOCK``). It waits only when it
        knows a state and the pool can spare the connection (as an acquire's wait:
        ``_acquire._wait``), on a pooled connection that reads for the wait."""
        pending = cancellations()

        async def work(connection: Any, spare: bool) -> tuple[Any, bool]:
            block = known is not None and spare
            args = observe_args(
                self.key, known, block_ms(OBSERVE_BLOCK) if block else None
            )
            try:
                reply = await command(connection, *args)
            except ResponseError as error:
                missing = module_missing(self.client, self.key, args, error)
                if missing is None:
                    raise
            else:
                return parse_observed(reply), block
            raise missing

        def read_timeout(own: Optional[float], spare: bool) -> Optional[float]:
            return None if own is None else own + OBSERVE_BLOCK

        observed, blocked = await exchange(self.client, self.key, work, read_timeout)
        raise_if_cancel_swallowed(pending)
        return observed, blocked


class Leadership:
    """A candidate's leadership, from ``Election.campaign``: it leads until
    ``resign()`` (or leaving ``async with``) or until the lease is lost.

    ``fence`` is above every earlier leadership's of the election: give it to what
    the leader writes (``fencelock.fenced(r, mark, leadership.fence, ...)``).
    ``value`` is the value it campaigned with or proclaimed last. Loss as for a
    lease (``lease`` is the lease underneath): ``lost`` is set, ``on_lost`` called,
    ``ensure_held()`` raises ``LockLost``."""

    def __init__(
        self, election: Election, lease: Lease, value: Value, lost_ok: bool
    ) -> None:
        self.election = election
        self.lease = lease
        self.value = value
        self.lost_ok = lost_ok
        # Set once resigned: True if it still led then.
        self.resigned = False
        # Between ``_hold`` and ``_leave``; what ``Locks._begin_holding`` returned.
        self._leading = False
        self._runner: Any = None

    def __repr__(self) -> str:
        kind = type(self)
        return (
            f"<{kind.__module__}.{kind.__qualname__} {self.election.key!r}"
            f" fence={self.fence}>"
        )

    @property
    def fence(self) -> int:
        return self.lease.fence

    @property
    def lost(self) -> Event:
        """Set when the leadership is lost (as ``Lease.lost``)."""
        return self.lease.lost

    @property
    def lost_reason(self) -> Optional[str]:
        return self.lease.lost_reason

    @property
    def time_left(self) -> float:
        """Seconds until the lease's deadline, as the client counts it."""
        return self.lease.time_left

    def ensure_held(self, check: bool = False) -> Checked:
        """Raises ``LockLost`` if the leadership was lost or its deadline passed
        (``check=True`` also asks the server); call it before an irreversible
        step; also once it resigned. On asyncio it works called or awaited; with
        ``check=True`` it must be awaited."""
        if not self._leading:
            raise self.lease.lost_error()
        return self.lease.ensure_held(check)

    def _hold(self, on_lost: Optional[OnLostLeadership], cancel_on_lost: bool) -> None:
        """Starts leading: the lease is refreshed (or kept by the session) and
        watched by the election's manager from now on, as in a ``holding`` block."""

        def report(_lease: Lease) -> Any:
            return None if on_lost is None else on_lost(self)

        self._runner = self.election.locks._begin_holding(
            self.lease,
            auto_refresh=True,
            min_hold=None,
            max_hold=None,
            on_lost=report,
            cancel_on_lost=cancel_on_lost,
        )
        self._leading = True

    async def proclaim(self, value: Value) -> None:
        """Makes ``value`` the leader's public value (``LOCK.PROCLAIM``; the fence
        and lease stay): observers see it. ``LockLost`` if it no longer leads (then
        nothing changed)."""
        self.ensure_held()
        key, token = self.lease.key, self.lease.token
        if not parse_flag(
            await call(self.election.client, key, *proclaim_args(key, token, value))
        ):
            await self.lease.report_lost(found_gone=True)
            raise self.lease.lost_error()
        self.value = value

    async def resign(self) -> bool:
        """Stops leading: the lock is released and handed to the next candidate
        (none is refreshed any more). True if it still led until now, False if the
        leadership had been lost; once resigned, again False."""
        if not self._leading:
            return False
        await self._leave(None)
        return self.resigned

    async def _leave(self, error: Optional[BaseException]) -> bool:
        """Ends what ``_hold`` began (at most once), as leaving a ``holding`` block
        with ``error``; whether ``error`` is to be swallowed (the cancellation that
        ``cancel_on_lost`` sent)."""
        if not self._leading:
            return False
        self._leading = False
        try:
            return await self.election.locks._end_holding(
                self.lease, self._runner, error, None, True
            )
        finally:
            self.resigned = self.lease.released

    async def __aenter__(self) -> Leadership:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool:
        """Resigns; after a loss raises ``LockLost`` (unless ``lost_ok``), as leaving
        a ``Locks.lock`` block does. An exception of the block goes on, but for the
        cancellation that ``cancel_on_lost`` sent, which becomes the ``LockLost``."""
        if not self._leading:
            return False  # resigned in the block already
        if self.lease.inherited():
            # A forked child leaving its parent's leadership: it stays the parent's.
            self._leading = False
            return False
        if await self._leave(exc):
            if not self.lost_ok:
                raise self.lease.lost_error() from exc
            return True
        if exc_type is None and not self.lost_ok and self.lease.expired():
            raise self.lease.lost_error()
        return False
