# Generated from fencelock/_async/surface.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""The part of redis-py's lock surface that ``Lock`` (one key, ``lock.py``) and
``MultiLock`` (several keys, ``multi.py``) share: redis-py's constructor arguments,
the per-thread (per-task) token, ``with`` and its ``raise_on_release_error``,
and what a fork leaves of them. Each subclass adds its keys and the commands."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from types import SimpleNamespace, TracebackType
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

from redis.exceptions import LockError

from .. import _forks
from .. import _telemetry as telemetry
from ..errors import ServerUnavailable, lock_error
from ._compat import check_client, new_local

if TYPE_CHECKING:
    from .._types import SyncClient

Number = Union[int, float]
Seconds = Optional[Number]
Flag = Optional[bool]
S = TypeVar("S", bound="RedisPyLock")


class RedisPyLock(ABC):
    """redis-py's lock arguments and token bookkeeping; ``locked_name`` is what an
    error names (``lock_name``: the key, or a ``MultiLock``'s tuple of keys)."""

    # Where a release error that ``raise_on_release_error=False`` silences is logged:
    # the logger of the subclass's own module.
    _logger: logging.Logger

    def __init__(
        self,
        redis: SyncClient,
        locked_name: Any,
        timeout: Optional[Number],
        sleep: Number,
        blocking: bool,
        blocking_timeout: Optional[Number],
        thread_local: bool,
        raise_on_release_error: bool,
        per_task: bool,
    ) -> None:
        check_client(redis, public_name(type(self)))
        self.redis = redis
        self._locked_name = locked_name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self._per_task = per_task
        self.local: Any = self._new_local()

    def _new_local(self) -> Any:
        local = new_local(self._per_task) if self.thread_local else SimpleNamespace()
        local.token = None
        self._clear_grant(local)
        # The child of an ``os.fork()`` starts without the parent's tokens.
        _forks.track(self)
        return local

    @abstractmethod
    def _clear_grant(self, local: Any) -> None:
        """Sets the grant's fence (or fences) of a fresh token store."""

    def _after_fork(self) -> None:
        """In the child of an ``os.fork()`` (``fencelock._forks``): what the parent
        held through this object stays the parent's, so the child holds nothing
        through it (its ``release()`` cannot release the parent's lock)."""
        self.local = self._new_local()

    def _token(self) -> Optional[bytes]:
        # Another thread's local storage starts empty: no token there means not ours.
        return getattr(self.local, "token", None)

    @abstractmethod
    def acquire(self) -> bool:
        """Takes the lock (every key of it); True once held."""

    @abstractmethod
    def release(self) -> None:
        """Releases what ``acquire`` took."""

    def __enter__(self: S) -> S:
        if self.acquire():
            # The block runs inside the holding's span (its spans are children).
            getattr(self.local, "holding", telemetry.NOTHING).enter()
            return self
        raise lock_error(
            LockError,
            "Unable to acquire lock within the time specified",
            self._locked_name,
        )

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        getattr(self.local, "holding", telemetry.NOTHING).leave()
        try:
            self.release()
        except ServerUnavailable:
            raise  # not a lock found unlocked: the server could not be asked
        except LockError:
            if self.raise_on_release_error:
                raise
            self._logger.warning(
                "Lock was unlocked or no longer owned when exiting context manager."
            )


def public_name(kind: type) -> str:
    """This package's class a lock is (``Lock``, ``Semaphore``, ``MultiLock``), also
    for a subclass of the user's own: what an error names."""
    ours = (
        c
        for c in kind.__mro__
        if c.__module__.startswith("fencelock.") and c is not RedisPyLock
    )
    return next(ours, kind).__name__
