"""One acquire for sync clients, shared by ``fencelock.Lock`` and ``fencelock.Locks``:
``LOCK.ACQUIRE`` with a client token and the server's ``BLOCK`` for waiting, on the
client's pool or on a pinned connection when the wait or ``WAIT`` needs one, and the
clean-up that keeps a failed acquire from leaving a holding behind."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Optional

from redis.exceptions import RedisError, ResponseError

from . import _pinned
from ._plan import Plan
from ._protocol import Key, Token, parse_grant, persist_args, release_args, wait_args
from .errors import NotReplicated, WrongMode

if TYPE_CHECKING:
    from ._types import SyncClient


def acquire(
    client: SyncClient,
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

    ``ttl_ms=None`` makes a lock without expiry. ``wait``: 0 tries once, None waits
    forever, else seconds in the server's FIFO queue. ``shared`` asks for a shared
    holding (a reader), ``limit=n`` for one of a semaphore's n permits; a shared
    holding needs a ttl. Error replies (``WRONGTYPE`` too) are raised, ``WRONGMODE`` as
    ``WrongMode``; nothing was granted then. Any failure after the request may have been
    granted (lost connection, interrupt, failed ``WAIT``) releases ``token``'s holding
    before the error propagates."""
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
    try:
        socket_timeout = _pinned.socket_timeout(client, key)
        if plan.pinned(socket_timeout):
            fence, acknowledged = _pinned.call(
                client,
                key,
                lambda connection: _exchange(connection, plan),
                plan.read_timeout(socket_timeout),
            )
        else:
            fence = parse_grant(client.execute_command(*plan.args()))
            acknowledged = None
    except ResponseError as error:
        # Refused: nothing was granted (and a token that holds in another mode keeps
        # that holding), so there is nothing to release.
        wrong = WrongMode.from_reply(key, error)
        if wrong is None:
            raise
        raise wrong from error
    except BaseException:
        release_quietly(client, key, token)
        raise
    if fence is None:
        return None
    try:
        if acknowledged is not None and acknowledged < wait_replicas:
            raise NotReplicated(key, wait_replicas, acknowledged)
        if ttl_ms is None:
            client.execute_command(*persist_args(key, token))
    except BaseException:
        release_quietly(client, key, token)
        raise
    return fence


def _exchange(connection: Any, plan: Plan) -> tuple[Optional[int], Optional[int]]:
    """The acquire and, after a grant, ``WAIT`` on the same connection. Runs again
    after a lost connection: the token makes the repeated acquire the same grant."""
    fence = parse_grant(_pinned.command(connection, *plan.args(time.monotonic())))
    if fence is None or not plan.wait_replicas:
        return fence, None
    reply = _pinned.command(
        connection, *wait_args(plan.wait_replicas, plan.replicas_timeout)
    )
    return fence, int(reply)


def release_quietly(client: SyncClient, key: Key, token: Token) -> None:
    """Best effort: the server may be unreachable, which is why we are here."""
    with contextlib.suppress(RedisError, OSError):
        client.execute_command(*release_args(key, token))
