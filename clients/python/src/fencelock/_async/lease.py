"""A held lock as the lock managers hand it out: key, token, fence, lease length, mode
(exclusive, shared, semaphore), the lease's deadline on this client's clock, whether it
was lost, and ``guard`` for commands that must only run while it is held.

The deadline is what the client may believe: the monotonic time the acquire was
*sent* plus the ttl, moved only by a refresh the server *confirmed* (its send time
plus its ttl), less one millisecond (``lease_end``). The server's lease started no
earlier than that send, by a clock it reads in whole milliseconds, rounded down: its
lease may begin up to 1 ms before the send as the client's clock counts it. So the
client never believes it holds the lock after the server may have given it to
someone else (clocks that run at the same rate assumed; no clock needs to agree with
another)."""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from redis.exceptions import LockError

from .. import _telemetry as telemetry
from .._protocol import Key, Mode, Token, fence_args, mode_of, to_ms
from ..errors import LockLost, lock_error
from . import guarded
from ._commands import call
from ._compat import Checked, Event, call_back, cancel, checked, current_owner

if TYPE_CHECKING:
    from .._types import AsyncClient

log = logging.getLogger("fencelock")

OnLost = Callable[["Lease"], Any]


@dataclass(eq=False)
class Lease:
    """A lock held through ``fencelock.asyncio.Locks``.

    ``lost`` (an event) is set, and ``on_lost(lease)`` called once, when the lease is
    found lost: its deadline passed with no refresh confirmed, a refresh or ``guard``
    was refused, the release found it gone, or ``ensure_held(check=True)`` asked the
    server; ``lost_reason`` says which way first (``LockLost.reason``). The token is
    never shown by ``repr``."""

    key: Key
    token: Token = field(repr=False)
    fence: int
    # The lease in seconds that each refresh restores (and each keepalive of its
    # session, unless the manager has a ``session_ttl`` of its own).
    ttl: float
    # When the granted acquire was sent, on the monotonic clock. ``min_hold`` and
    # ``max_hold`` count from here.
    acquired_at: float
    # A shared holder (a reader, or a permit of a semaphore of ``limit``).
    shared: bool = False
    limit: Optional[int] = None
    # Set on leaving: True if this holder still had the lock and released it.
    released: bool = False
    # The client of the ``Locks`` that granted it (``guard``, ``ensure_held``).
    client: Optional[AsyncClient] = field(default=None, repr=False)
    on_lost: Optional[OnLost] = field(default=None, repr=False)
    # No refresh is sent after this (``max_hold``), monotonic; None: no bound.
    refresh_until: Optional[float] = field(default=None, repr=False)
    # When the client stops believing it holds the lock, monotonic.
    deadline: float = field(default=0.0, repr=False)
    lost: Event = field(default_factory=Event, repr=False)
    # How the loss was found first, as ``LockLost.reason``; None while held.
    lost_reason: Optional[str] = field(default=None, repr=False)
    # The task to cancel when the lease is lost (``cancel_on_lost``).
    runner: Any = field(default=None, repr=False)
    # Whether ``report_lost`` cancelled ``runner``.
    cancelled_runner: bool = field(default=False, repr=False)
    # The session the holding belongs to (``Locks(session=True)``), None for a lease
    # of its own; as secret as the token, so never shown.
    session: Optional[str] = field(default=None, repr=False)
    # The process that acquired it: a forked child inherits the object, never the
    # holding (it neither refreshes nor releases it: ``Locks``).
    pid: int = field(default_factory=os.getpid, repr=False)
    # When the grant's reply arrived, monotonic (None for a lease made by hand): the
    # holding is measured from here, the wait before it is not part of it.
    granted_at: Optional[float] = field(default=None, repr=False)
    # Its span and measurements (``fencelock._telemetry``), once the manager holds it.
    holding: Any = field(default=telemetry.NOTHING, repr=False)
    _reported: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not self.deadline:
            self.deadline = lease_end(self.acquired_at, self.ttl)

    @property
    def mode(self) -> Mode:
        """``"exclusive"``, ``"shared"`` or ``"semaphore"``, as ``LOCK.INFO`` says."""
        return mode_of(self.shared, self.limit)

    @property
    def time_left(self) -> float:
        """Seconds until the deadline (0 once it has passed)."""
        return max(0.0, self.deadline - time.monotonic())

    def confirmed(self, sent_at: float, ttl: float) -> None:
        """A refresh sent at ``sent_at`` for ``ttl`` seconds was confirmed."""
        if not self.lost.is_set():
            self.deadline = lease_end(sent_at, ttl)

    def expired(self, now: Optional[float] = None) -> bool:
        """Whether the lease counts as lost now: found lost, or past its deadline."""
        if self.lost.is_set():
            return True
        if (time.monotonic() if now is None else now) >= self.deadline:
            # Final: a confirmation that arrives later does not bring it back.
            self._mark_lost(LockLost.DEADLINE)
            return True
        return False

    def lost_error(self) -> LockLost:
        """The ``LockLost`` that says how this lease was found lost."""
        return LockLost(self.key, self.lost_reason or LockLost.NOT_HELD)

    def closed_by_manager(self) -> None:
        """Its lock manager was closed, which released the holding (``LOCK.CLOSE``):
        no longer held, for ``ensure_held`` as for ``lost``; nothing is reported, as
        for a lease released by its holder (its telemetry too counts a release)."""
        self.holding.end()
        self._mark_lost(LockLost.CLOSED)
        self.released = True

    def start_holding(self, granted_at: float) -> None:
        """The manager holds it from now on (granted at ``granted_at``): its
        holding is measured until it is released or lost."""
        self.granted_at = granted_at
        self.holding = telemetry.holding(
            self.client, (self.key,), self.fence, self.mode, granted_at
        )

    def set_released(self, held: bool) -> None:
        """A release was answered: ``held`` if this token still held the lock (the
        holding ends released; if not, the loss reported next ends it)."""
        self.released = held
        if held:
            self.holding.end()

    def left(self) -> None:
        """Its block was left with the lease cut to what is left of ``min_hold``: the
        holder is done with it, though the server keeps it until that runs out."""
        self.holding.end()

    def held_for(self) -> float:
        """Seconds since the grant (since the acquire was sent, for a lease made by
        hand)."""
        since = self.acquired_at if self.granted_at is None else self.granted_at
        return max(0.0, time.monotonic() - since)

    def _mark_lost(self, reason: str) -> None:
        # The first finding stays: what came after it follows from it.
        if self.lost_reason is None:
            self.lost_reason = reason
        self.lost.set()
        self.holding.end(lost=self.lost_reason)

    def ensure_held(self, check: bool = False) -> Checked:
        """Raises ``LockLost`` if the lease was found lost or its deadline has passed,
        without a round trip; call it before an irreversible step. ``check=True``
        also asks the server (``LOCK.FENCE`` with the token). On asyncio it works
        called or awaited; with ``check=True`` it must be awaited."""
        if self.expired():
            # The block learns it here: no cancellation is needed on top.
            self.runner = None
            raise self.lost_error()
        if check:
            return self._ask_server()
        return checked()

    async def _ask_server(self) -> None:
        if self.client is None:
            raise self.no_client()
        if await call(self.client, self.key, *fence_args(self.key, self.token)) is None:
            await self.report_lost(found_gone=True)
            raise self.lost_error()

    async def guard(self, *command: Any) -> Any:
        """Runs ``command`` (``"SET", "{sku}:stock", 7``) only if this lease holds the
        lock now, checked and run in one step on the server (``LOCK.GUARD``); returns
        the command's reply. If it does not, nothing ran: the lease is reported lost
        (unless it was released) and ``LockLost`` raised."""
        if self.client is None:
            raise self.no_client()
        try:
            return await guarded.guard(self.client, self.key, self.token, *command)
        except LockLost:
            if self.released:
                raise
            await self.report_lost(found_gone=True)
        raise self.lost_error()

    async def report_lost(
        self, found_gone: bool = False, reason: Optional[str] = None
    ) -> None:
        """Marks the lease lost and tells its holder, once: ``lost``, a log line,
        cancelling the block (``cancel_on_lost``, unless the block itself found the
        loss and is raising ``LockLost`` already), ``on_lost``.

        ``found_gone``: the server answered that this token no longer holds the lock
        (else the deadline passed). Found before the deadline, the lease cannot have
        run out on the server (it ends no earlier than the deadline), so someone
        removed it (``LockLost.GONE``); after, the client cannot tell. ``reason``
        names it outright (``LockLost.CLOSED``)."""
        if reason is not None:
            self._mark_lost(reason)
        elif not found_gone:
            self._mark_lost(LockLost.DEADLINE)
        elif time.monotonic() < self.deadline:
            self._mark_lost(LockLost.GONE)
        else:
            self._mark_lost(LockLost.NOT_HELD)
        if self._reported:
            return
        self._reported = True
        reason = self.lost_reason or LockLost.NOT_HELD
        # The fields of the holding's span and its trace context, for structured log
        # handlers; made with the span current, wherever the loss was found (the
        # refresher), so OpenTelemetry's logging handler links the record to it.
        fields = telemetry.hold_fields(
            self.client, (self.key,), self.fence, self.mode, self.held_for(), reason
        )
        fields.update(self.holding.trace_fields())
        with self.holding.current():
            log.warning(
                "fencelock: lost the lock %r (fence %d): %s",
                self.key,
                self.fence,
                LockLost.MEANING[reason],
                extra=fields,
            )
        runner, self.runner = self.runner, None
        if runner is not None and runner is not current_owner():
            self.cancelled_runner = True
            cancel(runner)
        if self.on_lost is not None:
            try:
                await call_back(self.on_lost, self)
            except Exception:
                log.exception("fencelock: on_lost for %r failed", self.key)

    def hold_left_ms(self, min_hold: Optional[float], now: float) -> int:
        """What is left of ``min_hold`` at ``now`` in whole ms (rounded up, so the lock
        is never given up early); 0 when nothing is."""
        if not min_hold:
            return 0
        return max(0, math.ceil((self.acquired_at + min_hold - now) * 1000))

    def inherited(self) -> bool:
        """Whether this lease was acquired by another process (this one is its forked
        child): the holding is that process's."""
        return self.pid != os.getpid()

    def no_client(self) -> Exception:
        """The error of ``guard`` on a lease made by hand, without a client."""
        return lock_error(
            LockError, "this lease has no client: take it through Locks", self.key
        )


# The grain of the clock the server starts a lease by: whole milliseconds, rounded
# down, so the lease may start up to this long before the request was sent.
SERVER_CLOCK_GRAIN = 0.001


def lease_end(sent_at: float, ttl: float) -> float:
    """The earliest the server may end a lease of ``ttl`` seconds asked for (acquired,
    refreshed, kept alive) by a request sent at ``sent_at`` (monotonic): the ttl as
    the server got it (whole ms, truncated) from one grain of its clock before the
    send."""
    return sent_at + to_ms(ttl) / 1000 - SERVER_CLOCK_GRAIN
