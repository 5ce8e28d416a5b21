"""Clean-up that a cancellation must not cut short. When the task is cancelled while
it waits for a grant, refreshes or releases, the release it still owes the server runs
in a task of its own that a second cancellation of the caller does not stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import RedisError

from .._protocol import Key, Token, release_args

if TYPE_CHECKING:
    from .._types import AsyncClient

T = TypeVar("T")

# The event loop keeps only weak references to tasks: these must not vanish midway.
_running: set[asyncio.Future[Any]] = set()


async def shielded(work: Awaitable[T]) -> T:
    """Awaits ``work`` to the end even if the caller is cancelled meanwhile (the
    caller then sees its ``CancelledError`` at once; the work goes on)."""
    task = asyncio.ensure_future(work)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return await asyncio.shield(task)


def cancellations() -> int:
    """How many cancellations of the current task are pending (Python >= 3.11)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def raise_if_cancel_swallowed(before: int) -> None:
    """Re-raises a cancellation that arrived since ``before`` but was swallowed below
    us: Python 3.11's ``asyncio.wait_for``, which redis-py wraps around every send
    when a socket timeout is set, drops a cancel that lands as the send completes.
    Without this a timeout around an acquire could be lost, and the block would run
    unbounded. (Python < 3.11 cannot tell; there it is a no-op.)"""
    if cancellations() > before:
        raise asyncio.CancelledError


async def release_quietly(client: AsyncClient, key: Key, token: Token) -> None:
    """Best effort: the server may be unreachable, which is why we are here."""
    with contextlib.suppress(RedisError, OSError):
        await client.execute_command(*release_args(key, token))
