"""One run-once claim (``LOCK.ONCE``) for ``Locks.once_result``: one try, or a wait in
the server's FIFO queue on a borrowed connection that reads for as long as the wait
needs, as an acquire waits (``_acquire``). The reply is a grant (the caller runs),
a stored result (a duplicate), or nil (it runs elsewhere and the wait ended).

A failure after the claim may have been granted (lost connection, cancellation)
gives the run up (``LOCK.RELEASE`` of the token) before the error goes on, so the next
duplicate runs it rather than waiting for a lease that nobody holds."""

from __future__ import annotations

import time
from typing import Any, Optional

from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from .._once import Claim, Fingerprint, once_args, parse_claim
from .._plan import Plan
from .._protocol import Key, Token
from .._servers import describe
from ..errors import Deadlock, FingerprintMismatch, ServerUnavailable, WrongSession
from ._acquire import MIN_PAUSE
from ._commands import module_missing, release_quietly
from ._compat import cancellations, raise_if_cancel_swallowed, shielded, sleep
from ._connection import command, exchange


async def claim(
    client: Any,
    key: Key,
    token: Token,
    *,
    ttl_ms: int,
    keep_ms: int,
    wait: Optional[float],
    fingerprint: Optional[Fingerprint],
    session: Optional[Token],
    poll: float,
) -> tuple[Optional[Claim], float]:
    """The claim's answer (None: running elsewhere for the whole ``wait``) and when
    the claim that was answered was sent (monotonic: a granted lease ends no earlier
    than that plus its ttl). ``FINGERPRINT``, ``WRONGSESSION`` and ``DEADLOCK``
    replies are raised as their errors, "unknown command" as ``ModuleNotLoaded``;
    a server that cannot be reached as ``ServerUnavailable``."""
    plan = Plan.make(key, token, ttl_ms, wait, 0, 1.0, session=session)
    pending = cancellations()
    sent = [time.monotonic()]

    def args(block: bool) -> tuple[Any, ...]:
        left = plan.left(time.monotonic())
        return once_args(
            key,
            ttl_ms,
            keep_ms,
            token,
            (plan.wait if left is None else left) if block else 0,
            fingerprint=fingerprint,
            session=session,
        )

    try:
        if plan.blocks:
            claimed = await _wait(client, plan, args, sent, poll)
        else:
            claimed = parse_claim(await client.execute_command(*args(False)))
        raise_if_cancel_swallowed(pending)
    except ResponseError as error:
        refused = (
            FingerprintMismatch.from_reply(key, error)
            or WrongSession.from_reply(key, error)
            or Deadlock.from_reply(key, error)
            or module_missing(client, key, args(False), error)
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
        return claimed, sent[0]
    # Raised outside the handler: the server's message repeats the arguments (the
    # token among them) and must not ride along as ``__context__``.
    raise refused


async def _wait(
    client: Any, plan: Plan, args: Any, sent: list[float], poll: float
) -> Optional[Claim]:
    """The claim that waits, as ``_acquire._wait``: one ``BLOCK`` for the whole wait
    while the pool has a connection to spare besides the one it holds, else a try
    every ``poll`` seconds (a waiter never holds a bounded pool's last connection,
    which the runner needs to store its result)."""

    async def work(connection: Any, spare: bool) -> tuple[Optional[Claim], bool]:
        sent[0] = time.monotonic()
        return parse_claim(await command(connection, *args(spare))), not spare

    while True:
        claimed, tried = await exchange(client, plan.key, work, plan.read_timeout)
        if claimed is not None or not tried:
            return claimed
        left = plan.left(time.monotonic())
        if left is not None and left <= 0:
            return None
        pause = max(poll, MIN_PAUSE)
        await sleep(pause if left is None else min(pause, left))
