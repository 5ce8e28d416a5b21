"""One acquire for asyncio clients, shared by ``fencelock.asyncio.Lock`` and
``fencelock.asyncio.Locks``; the sync twin is ``fencelock._acquire``. A cancellation
while waiting (or after the request may have been granted) releases the token's
holding before the ``CancelledError`` goes on."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from redis.exceptions import ResponseError

from .._plan import Plan
from .._protocol import Key, Token, parse_grant, persist_args, wait_args
from ..errors import NotReplicated, WrongMode
from . import _pinned
from ._cleanup import (
    cancellations,
    raise_if_cancel_swallowed,
    release_quietly,
    shielded,
)

if TYPE_CHECKING:
    from .._types import AsyncClient


async def acquire(
    client: AsyncClient,
    key: Key,
    token: Token,
    *,
    ttl_ms: Optional[int],
    wait: Optional[float],
    wait_replicas: int = 0,
    replicas_timeout: float = 1.0,
    shared: bool = False,
    limit: Optional[int] = None,
) -> Optional[int]:
    """Asks for the lock at ``key`` for ``token``; returns the fence, or None if busy.
    Arguments and errors as ``fencelock._acquire.acquire``."""
    plan = Plan.make(
        key,
        token,
        ttl_ms,
        wait,
        wait_replicas,
        replicas_timeout,
        shared=shared,
        limit=limit,
    )
    pending = cancellations()
    try:
        socket_timeout = await _pinned.socket_timeout(client, key)
        if plan.pinned(socket_timeout):
            fence, acknowledged = await _pinned.call(
                client,
                key,
                lambda connection: _exchange(connection, plan),
                plan.read_timeout(socket_timeout),
            )
        else:
            fence = parse_grant(await client.execute_command(*plan.args()))
            acknowledged = None
        raise_if_cancel_swallowed(pending)
    except ResponseError as error:
        # Refused: nothing was granted (and a token that holds in another mode keeps
        # that holding), so there is nothing to release.
        wrong = WrongMode.from_reply(key, error)
        if wrong is None:
            raise
        raise wrong from error
    except BaseException:
        await shielded(release_quietly(client, key, token))
        raise
    if fence is None:
        return None
    try:
        if acknowledged is not None and acknowledged < wait_replicas:
            raise NotReplicated(key, wait_replicas, acknowledged)
        if ttl_ms is None:
            await client.execute_command(*persist_args(key, token))
            raise_if_cancel_swallowed(pending)
    except BaseException:
        await shielded(release_quietly(client, key, token))
        raise
    return fence


async def _exchange(connection: Any, plan: Plan) -> tuple[Optional[int], Optional[int]]:
    """The acquire and, after a grant, ``WAIT`` on the same connection."""
    reply = await _pinned.command(connection, *plan.args(time.monotonic()))
    fence = parse_grant(reply)
    if fence is None or not plan.wait_replicas:
        return fence, None
    args = wait_args(plan.wait_replicas, plan.replicas_timeout)
    return fence, int(await _pinned.command(connection, *args))
