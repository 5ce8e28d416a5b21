"""Attributes with a value of their own in each asyncio task, as ``threading.local``
has one in each thread: where ``fencelock.asyncio`` keeps the token of a shared lock
or a semaphore, so that concurrent tasks can hold one through the same object
(``async with permits:`` in every worker).

The values live in a ``ContextVar``. A task starts with a copy of its creator's
context: it sees what was set before it was created, and what it sets stays its own.
So ``acquire`` and ``release`` must run in the same task, as ``async with`` does
(before Python 3.12, ``asyncio.wait_for(lock.acquire(), t)`` runs ``acquire`` in a task
of its own: use ``blocking_timeout`` instead)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Optional


class TaskLocal:
    __slots__ = ("_values",)
    _values: ContextVar[Optional[dict[str, Any]]]

    def __init__(self) -> None:
        # One variable per object: a context keeps the variables set in it until it
        # ends, not the lock object.
        values: ContextVar[Optional[dict[str, Any]]] = ContextVar(
            "fencelock_lock_state", default=None
        )
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name: str) -> Any:
        values = self._values.get()
        if values is None or name not in values:
            raise AttributeError(name)
        return values[name]

    def __setattr__(self, name: str, value: Any) -> None:
        # Copied, never changed in place: a task created earlier holds the old dict.
        values = dict(self._values.get() or {})
        values[name] = value
        self._values.set(values)
