"""``fencelock.asyncio.Lock`` / ``fencelock.Lock``: a drop-in ``lock_class`` for
redis-py's clients.

    lock = r.lock("report", timeout=30, blocking_timeout=5, lock_class=fencelock.Lock)
    with lock:
        write(fence=lock.fence)

Same constructor, methods, return values and exceptions as ``redis.lock.Lock`` (and
``redis.asyncio.lock.Lock``), on the module's commands instead of ``SET NX`` and Lua:
waiting is the server's FIFO ``BLOCK`` (no polling), ``extend`` is one
``LOCK.REFRESH … ADD``, and every grant carries a fence. ``guard(*command)`` runs a
command only while the lock is still held (``LOCK.GUARD``). Cancelling a task that
waits in ``acquire`` leaves no holding behind.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Literal, Optional

from redis.exceptions import LockError, LockNotOwnedError, ResponseError

from .. import _lockstate as state
from .. import _telemetry as telemetry
from .._protocol import (
    Key,
    Mode,
    Token,
    fence_args,
    is_wrongtype,
    mode_of,
    parse_flag,
    refresh_args,
    release_args,
    to_ms,
)
from ..errors import LockLost, lock_error, self_wait_refused
from . import guarded
from ._acquire import Grant
from ._acquire import acquire as acquire_once
from ._commands import call, reaching
from ._compat import current_owner
from ._compat import sleep as sleep_for
from .surface import Flag, Number, RedisPyLock, Seconds

if TYPE_CHECKING:
    from .._types import AsyncClient


class Lock(RedisPyLock):
    """A distributed lock on the fencelock module, shaped like redis-py's lock.

    Arguments as redis-py's. ``sleep`` is accepted for compatibility; waiting is done by
    the server's queue, so it is only used while the key holds another type (a plain
    ``SET`` lock of a not yet migrated client), which the server cannot queue on, and
    while the client's bounded pool has no connection to spare for a wait: the wait
    would take the last one, which the holder needs for its own commands, so it tries
    every ``sleep`` seconds instead, as redis-py's lock does.
    ``wait_replicas`` (keyword only) makes ``acquire`` also wait until that many
    replicas have the grant (``WAIT``), else release it and raise ``NotReplicated``.
    ``shared=True`` (keyword only) makes it a reader: any number of shared holders hold
    the key together while no exclusive holder does (``ReadWriteLock.read()`` is one);
    a shared lock needs a ``timeout``. An acquire in another mode than the key's
    holders raises ``WrongMode``.

    Tokens are kept per thread (``thread_local=True``, as redis-py). On asyncio a
    shared lock, a ``Semaphore`` and a ``ReadWriteLock``'s locks keep theirs per task,
    so that tasks can hold one through the same object: acquire and release in the
    same task, as ``async with`` does."""

    _logger = logging.getLogger(__name__)

    def __init__(
        self,
        redis: AsyncClient,
        name: Key,
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        wait_replicas: int = 0,
        wait_replicas_timeout: Number = 1.0,
        shared: bool = False,
        per_task: bool = False,
    ) -> None:
        self.name = name
        super().__init__(
            redis,
            name,
            timeout,
            sleep,
            blocking,
            blocking_timeout,
            thread_local,
            raise_on_release_error,
            per_task=shared or per_task,
        )
        self.wait_replicas = wait_replicas
        self.wait_replicas_timeout = wait_replicas_timeout
        self.shared = shared
        # A semaphore's number of permits (``Semaphore``); None: no limit.
        self.limit: Optional[int] = None
        # The other lock of the same ``ReadWriteLock``: asking for this one while
        # this thread (task) holds that one is an upgrade or a downgrade.
        self.other_side: Optional[Lock] = None
        if shared:
            state.check_shared_timeout(timeout)

    def _clear_grant(self, local: Any) -> None:
        local.fence = None
        local.holding = telemetry.NOTHING

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} {self.name!r}>"

    @property
    def mode(self) -> Mode:
        """How this lock holds its key: ``"exclusive"``, ``"shared"`` (a reader) or
        ``"semaphore"`` (one permit of ``limit``), as ``LOCK.INFO`` names it."""
        return mode_of(self.shared, self.limit)

    @property
    def fence(self) -> Optional[int]:
        """The fence of this thread's (task's) last grant (None before the first):
        hand it to the resource you write so that it refuses a holder whose lease has
        ended."""
        return getattr(self.local, "fence", None)

    async def acquire(
        self,
        blocking: Flag = None,  # sync: sleep: Seconds = None,
        blocking_timeout: Seconds = None,  # sync: blocking: Flag = None,
        token: Optional[Token] = None,  # sync: blocking_timeout: Seconds = None,
        sleep: Seconds = None,  # sync: token: Optional[Token] = None,
    ) -> bool:
        """Takes the lock; True once held. ``blocking=False`` tries once;
        ``blocking_timeout`` bounds the wait in seconds (None: forever; 0: one try).
        ``token`` picks the token (str or bytes), else 128 random bits are used.

        A wait of any length, on any client (pooled, ``from_url``, Sentinel, cluster),
        ends in a grant, in False, or in a ``LockError``: ``ServerUnavailable`` when
        the server could not be reached or did not answer in time."""
        sleep = self.sleep if sleep is None else sleep
        blocking = self.blocking if blocking is None else blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        self._refuse_upgrade()
        encoded = state.encode_token(self.redis, token)
        deadline = state.deadline(blocking, blocking_timeout, time.monotonic())
        with telemetry.acquiring(
            self.redis,
            (self.name,),
            "LOCK.ACQUIRE",
            self.mode,
            state.wait_asked(blocking, blocking_timeout),
        ) as attempt:
            grant = await self._take(blocking, deadline, encoded, sleep)
            if grant is None:
                return False
            attempt.granted(grant.fence)
        self.local.token = encoded
        self.local.fence = grant.fence
        self.local.owner = current_owner()
        self.local.holding = telemetry.holding(
            self.redis, (self.name,), grant.fence, self.mode, grant.answered
        )
        return True

    async def _take(
        self, blocking: bool, deadline: Optional[float], encoded: bytes, sleep: float
    ) -> Optional[Grant]:
        """The grant, or None when the wait (or the one try) ended first."""
        while True:
            wait = state.wait_left(blocking, deadline, time.monotonic())
            try:
                return await acquire_once(
                    self.redis,
                    self.name,
                    encoded,
                    ttl_ms=state.ttl_ms(self.timeout),
                    wait=wait,
                    wait_replicas=self.wait_replicas,
                    replicas_timeout=self.wait_replicas_timeout,
                    shared=self.shared,
                    limit=self.limit,
                    poll=sleep,
                )
            except ResponseError as error:
                if not is_wrongtype(error):
                    raise
                # Another type at the key: busy, as for redis-py, but the server
                # cannot queue us behind it, so poll until it goes or time runs out.
                if not state.may_poll(blocking, deadline, sleep, time.monotonic()):
                    return None
                await sleep_for(sleep)

    async def locked(self) -> bool:
        """True if anyone holds the lock (any value at the key, as for redis-py)."""
        return bool(
            await reaching(self.redis, self.name, lambda: self.redis.exists(self.name))
        )

    async def owned(self) -> bool:
        """True if this lock's token (this thread's, by default) holds the lock."""
        token = self._token()
        if token is None:
            return False
        try:
            reply = await reaching(
                self.redis,
                self.name,
                lambda: call(self.redis, self.name, *fence_args(self.name, token)),
            )
        except ResponseError as error:
            if is_wrongtype(error):
                return False
            raise
        return reply is not None

    async def release(self) -> None:
        """Releases the lock; ``LockLost`` (a ``LockNotOwnedError``, as redis-py
        raises) if its lease had already ended.

        The token is kept until the server answered (as redis-py's asyncio lock), so
        a release interrupted by a cancellation or a lost connection can be retried."""
        expected_token = self._token()
        if expected_token is None:
            raise lock_error(
                LockError,
                "Cannot release a lock that's not owned or is already unlocked.",
                self.name,
            )
        try:
            await self.do_release(expected_token)
        except LockNotOwnedError:
            self.local.token = None
            self._end_holding(LockLost.NOT_HELD)
            raise
        self.local.token = None
        self._end_holding(None)

    def _end_holding(self, lost: Optional[str]) -> None:
        """The end of this thread's (task's) holding, for its telemetry."""
        getattr(self.local, "holding", telemetry.NOTHING).end(lost=lost)

    async def do_release(self, expected_token: bytes) -> None:
        if not await self._owner_command(release_args(self.name, expected_token)):
            # The lease ended while held: a loss, as everywhere in the package
            # (``LockLost`` is the ``LockNotOwnedError`` redis-py raises here).
            raise LockLost.in_words_of_redis_py(
                self.name, "Cannot release a lock that's no longer owned", self.name
            )

    async def extend(
        self, additional_time: Number, replace_ttl: bool = False
    ) -> Literal[True]:
        """Adds ``additional_time`` seconds to the lease left (atomically, on the
        server), or with ``replace_ttl=True`` makes the lease that long from now."""
        if self._token() is None:
            raise lock_error(LockError, "Cannot extend an unlocked lock", self.name)
        if self.timeout is None:
            raise lock_error(
                LockError, "Cannot extend a lock with no timeout", self.name
            )
        return await self.do_extend(additional_time, replace_ttl)

    async def do_extend(
        self, additional_time: Number, replace_ttl: bool
    ) -> Literal[True]:
        args = refresh_args(
            self.name, self._token() or b"", to_ms(additional_time), add=not replace_ttl
        )
        if not await self._owner_command(args):
            self._end_holding(LockLost.NOT_HELD)
            raise lock_error(
                LockNotOwnedError,
                "Cannot extend a lock that's no longer owned",
                self.name,
            )
        return True

    async def reacquire(self) -> Literal[True]:
        """Restarts the lease at ``timeout`` from now."""
        if self._token() is None:
            raise lock_error(LockError, "Cannot reacquire an unlocked lock", self.name)
        if self.timeout is None:
            raise lock_error(
                LockError, "Cannot reacquire a lock with no timeout", self.name
            )
        return await self.do_reacquire()

    async def do_reacquire(self) -> Literal[True]:
        assert self.timeout is not None
        args = refresh_args(self.name, self._token() or b"", to_ms(self.timeout))
        if not await self._owner_command(args):
            self._end_holding(LockLost.NOT_HELD)
            raise lock_error(
                LockNotOwnedError,
                "Cannot reacquire a lock that's no longer owned",
                self.name,
            )
        return True

    async def guard(self, *command: Any) -> Any:
        """Runs ``command`` (``"SET", "stock", 7``) only if this lock's token holds
        the lock now, checked and run in one step on the server (``LOCK.GUARD``);
        returns the command's reply. ``LockLost``, a ``LockNotOwnedError``, if the
        lease has ended: nothing ran."""
        token = self._token()
        if token is None:
            raise lock_error(
                LockError, "Cannot guard a command with an unlocked lock", self.name
            )
        return await reaching(
            self.redis,
            self.name,
            lambda: guarded.guard(self.redis, self.name, token, *command),
        )

    def holds_here(self) -> bool:
        """Whether this thread (task) took this lock object and has not released it."""
        return (
            self._token() is not None
            and getattr(self.local, "owner", None) == current_owner()
        )

    def _refuse_upgrade(self) -> None:
        """An upgrade (read to write) waits for every reader, this one too, and a
        downgrade for the writer, itself: forever. The server cannot tell (another
        token asks), so the client refuses it at once."""
        other = self.other_side
        if other is not None and other.holds_here():
            raise self_wait_refused(self.name, other.mode, "its " + _side(other))

    async def _owner_command(self, args: tuple[Any, ...]) -> bool:
        """An owner-checked command (refresh, release): another type at the key means
        the token does not hold it."""
        try:
            reply = await reaching(
                self.redis, self.name, lambda: call(self.redis, self.name, *args)
            )
        except ResponseError as error:
            if is_wrongtype(error):
                return False
            raise
        return parse_flag(reply)


def _side(lock: Lock) -> str:
    return "read lock" if lock.shared else "write lock"
