"""``fencelock.asyncio.Lock``: a drop-in ``lock_class`` for ``redis.asyncio`` clients.

    lock = r.lock("report", timeout=30, blocking_timeout=5, lock_class=Lock)
    async with lock:
        await write(fence=lock.fence)

Same constructor, methods, return values and exceptions as
``redis.asyncio.lock.Lock``, on the module's commands (see ``fencelock.lock`` for the
sync one). Cancelling a task that waits in ``acquire`` leaves no holding behind.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from types import SimpleNamespace, TracebackType
from typing import TYPE_CHECKING, Any, Literal, Optional, TypeVar, Union

from redis.exceptions import LockError, LockNotOwnedError, ResponseError

from .. import _lockstate as state
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
from ..errors import lock_error
from . import guarded
from ._acquire import acquire as acquire_once
from ._tasklocal import TaskLocal

if TYPE_CHECKING:
    from .._types import AsyncClient

logger = logging.getLogger(__name__)

Number = Union[int, float]
L = TypeVar("L", bound="Lock")


class Lock:
    """A distributed lock on the fencelock module, shaped like
    ``redis.asyncio.lock.Lock``; arguments and extras (``shared`` too) as
    ``fencelock.Lock``.

    A shared lock (and a ``Semaphore``) keeps its token per asyncio task with
    ``thread_local=True`` (the default), not per thread, so that tasks holding it at
    the same time can share the object: acquire and release it in the same task, as
    ``async with`` does. ``thread_local=False``: one token for the object."""

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
    ) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.wait_replicas = wait_replicas
        self.wait_replicas_timeout = wait_replicas_timeout
        self.local: Any
        if not self.thread_local:
            self.local = SimpleNamespace()
        elif shared:
            # Shared holders in concurrent tasks of one thread: a token per task.
            self.local = TaskLocal()
        else:
            self.local = threading.local()
        self.local.token = None
        self.local.fence = None
        self.shared = shared
        # A semaphore's number of permits (``Semaphore``); None: no limit.
        self.limit: Optional[int] = None
        if shared:
            state.check_shared_timeout(timeout)

    @property
    def mode(self) -> Mode:
        """How this lock holds its key: ``"exclusive"``, ``"shared"`` (a reader) or
        ``"semaphore"`` (one permit of ``limit``), as ``LOCK.INFO`` names it."""
        return mode_of(self.shared, self.limit)

    @property
    def fence(self) -> Optional[int]:
        """The fence of the last grant (None before the first)."""
        return getattr(self.local, "fence", None)

    async def __aenter__(self: L) -> L:
        if await self.acquire():
            return self
        raise lock_error(
            LockError, "Unable to acquire lock within the time specified", self.name
        )

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning(
                "Lock was unlocked or no longer owned when exiting context manager."
            )

    async def acquire(
        self,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Token] = None,
    ) -> bool:
        """Takes the lock; True once held. Arguments as ``fencelock.Lock.acquire``."""
        blocking = self.blocking if blocking is None else blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        encoded = state.encode_token(self.redis, token)
        deadline = state.deadline(blocking, blocking_timeout, time.monotonic())
        while True:
            wait = state.wait_left(blocking, deadline, time.monotonic())
            try:
                fence = await acquire_once(
                    self.redis,
                    self.name,
                    encoded,
                    ttl_ms=state.ttl_ms(self.timeout),
                    wait=wait,
                    wait_replicas=self.wait_replicas,
                    replicas_timeout=self.wait_replicas_timeout,
                    shared=self.shared,
                    limit=self.limit,
                )
            except ResponseError as error:
                if not is_wrongtype(error):
                    raise
                # Another type at the key: busy, but the server cannot queue us.
                if not state.may_poll(blocking, deadline, self.sleep, time.monotonic()):
                    return False
                await asyncio.sleep(self.sleep)
                continue
            if fence is None:
                return False
            self.local.token = encoded
            self.local.fence = fence
            return True

    async def locked(self) -> bool:
        """True if anyone holds the lock (any value at the key, as for redis-py)."""
        return bool(await self.redis.exists(self.name))

    async def owned(self) -> bool:
        """True if this lock's token holds the lock."""
        token = self._token()
        if token is None:
            return False
        try:
            reply = await self.redis.execute_command(*fence_args(self.name, token))
        except ResponseError as error:
            if is_wrongtype(error):
                return False
            raise
        return reply is not None

    async def release(self) -> None:
        """Releases the lock; ``LockNotOwnedError`` if its lease had already ended.

        As redis-py's asyncio lock, the token is kept until the server answered, so a
        release interrupted by a cancellation or a lost connection can be retried."""
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
            raise
        self.local.token = None

    async def do_release(self, expected_token: bytes) -> None:
        if not await self._owner_command(release_args(self.name, expected_token)):
            raise lock_error(
                LockNotOwnedError,
                "Cannot release a lock that's no longer owned",
                self.name,
            )

    async def extend(
        self, additional_time: Number, replace_ttl: bool = False
    ) -> Literal[True]:
        """Adds ``additional_time`` seconds to the lease left, atomically on the server
        (``replace_ttl=True``: makes the lease that long from now)."""
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
        return await guarded.guard(self.redis, self.name, token, *command)

    def _token(self) -> Optional[bytes]:
        # Another thread's local storage starts empty: no token there means not ours.
        return getattr(self.local, "token", None)

    async def _owner_command(self, args: tuple[Any, ...]) -> bool:
        """An owner-checked command: another type at the key means not held by us."""
        try:
            return parse_flag(await self.redis.execute_command(*args))
        except ResponseError as error:
            if is_wrongtype(error):
                return False
            raise
