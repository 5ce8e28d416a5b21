"""Guarded and fenced calls for asyncio clients; behaviour, routing and replies as
``fencelock.guarded``. A cancellation that redis-py's I/O swallowed (Python 3.11's
``asyncio.wait_for``) is raised again after the reply, as for acquires, so that a
timeout around a guarded write still ends the caller's block."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from .._protocol import (
    Args,
    Key,
    Token,
    fenced_args,
    guard_args,
    is_notheld,
    stale_highest,
)
from ..errors import LockLost, StaleFence
from ._cleanup import cancellations, raise_if_cancel_swallowed

if TYPE_CHECKING:
    from .._types import AsyncClient


async def guard(client: AsyncClient, key: Key, token: Token, *command: Any) -> Any:
    """Runs ``command`` only if ``token`` holds the lock ``key`` now; returns its
    reply. ``LockLost`` if not: nothing ran."""
    try:
        return await _call(client, guard_args(key, token, command))
    except ResponseError as error:
        if is_notheld(error):
            raise LockLost(key) from error
        raise


async def fenced(client: AsyncClient, mark: Key, fence: int, *command: Any) -> Any:
    """Runs ``command`` only if ``fence`` is at least the highest that ``mark`` has
    admitted; returns its reply. ``StaleFence`` if it is below: nothing ran."""
    try:
        return await _call(client, fenced_args(mark, fence, command))
    except ResponseError as error:
        highest = stale_highest(error)
        if highest is None:
            raise
        raise StaleFence(mark, fence, highest) from error


async def _call(client: AsyncClient, args: Args) -> Any:
    pending = cancellations()
    reply = await client.execute_command(*args)
    raise_if_cancel_swallowed(pending)
    return reply
