"""One acquire, shared by the drop-in locks and the lock managers: ``LOCK.ACQUIRE``
with a client token and the server's ``BLOCK`` for waiting, on a pooled connection
that reads for as long as the wait needs (``_connection``), and the clean-up that keeps
a failed acquire from leaving a holding behind. A cancellation while waiting (or
after the request may have been granted) releases the token's holding before the
``CancelledError`` goes on."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from .._plan import Plan
from .._protocol import Key, Token, parse_grant, persist_args, wait_args
from .._servers import describe
from ..errors import NotReplicated, ServerUnavailable, WrongMode
from ._commands import call, module_missing, release_quietly
from ._compat import cancellations, raise_if_cancel_swallowed, shielded
from ._connection import command, exchange


@dataclass(frozen=True)
class Grant:
    fence: int
    # When the acquire that was granted was sent, and when its reply arrived, on the
    # monotonic clock: the lease ends no earlier than ``sent`` + ttl.
    sent: float
    answered: float


async def acquire(
    client: Any,
    key: Key,
    token: Token,
    *,
    ttl_ms: Optional[int],
    wait: Optional[float],
    wait_replicas: int = 0,
    replicas_timeout: float = 1.0,
    shared: bool = False,
    limit: Optional[int] = None,
) -> Optional[Grant]:
    """Asks for the lock at ``key`` for ``token``; the grant, or None if busy.

    ``ttl_ms=None`` makes a lock without expiry. ``wait``: 0 tries once, None waits
    forever, else seconds in the server's FIFO queue. ``shared`` asks for a shared
    holding (a reader), ``limit=n`` for one of a semaphore's n permits; a shared
    holding needs a ttl. Error replies (``WRONGTYPE`` too) are raised, ``WRONGMODE`` as
    ``WrongMode``, "unknown command" as ``ModuleNotLoaded``; nothing was granted then.
    A server that cannot be reached or does not answer in time raises
    ``ServerUnavailable``. Any failure after the request may have been granted (lost
    connection, interrupt, failed ``WAIT``) releases ``token``'s holding before the
    error propagates."""
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
    sent = [time.monotonic()]
    try:
        if plan.blocks or wait_replicas:
            fence, acknowledged = await exchange(
                client,
                key,
                lambda connection: _exchange(connection, plan, sent),
                plan.read_timeout,
            )
        else:
            fence = parse_grant(await client.execute_command(*plan.args()))
            acknowledged = None
        raise_if_cancel_swallowed(pending)
    except ResponseError as error:
        # Refused: nothing was granted (and a token that holds in another mode keeps
        # that holding), so there is nothing to release.
        refused = WrongMode.from_reply(key, error) or module_missing(
            client, key, plan.args(), error
        )
        if refused is None:
            raise
    except (ConnectionError, TimeoutError) as error:
        await shielded(release_quietly(client, key, token))
        raise ServerUnavailable(key, describe(client, key), error) from error
    except BaseException:
        await shielded(release_quietly(client, key, token))
        raise
    else:
        refused = None
    if refused is not None:
        # Raised outside the handler: the server's message repeats the arguments (the
        # token among them) and must not ride along as ``__context__``.
        raise refused
    if fence is None:
        return None
    grant = Grant(fence, sent[0], time.monotonic())
    try:
        if acknowledged is not None and acknowledged < wait_replicas:
            raise NotReplicated(key, wait_replicas, acknowledged)
        if ttl_ms is None:
            await call(client, key, *persist_args(key, token))
    except BaseException:
        await shielded(release_quietly(client, key, token))
        raise
    return grant


async def _exchange(
    connection: Any, plan: Plan, sent: list[float]
) -> tuple[Optional[int], Optional[int]]:
    """The acquire and, after a grant, ``WAIT`` on the same connection. Runs again
    after a lost connection: the token makes the repeated acquire the same grant,
    and it asks only for the time left of the wait."""
    sent[0] = time.monotonic()
    fence = parse_grant(await command(connection, *plan.args(sent[0])))
    if fence is None or not plan.wait_replicas:
        return fence, None
    reply = await command(
        connection, *wait_args(plan.wait_replicas, plan.replicas_timeout)
    )
    return fence, int(reply)
