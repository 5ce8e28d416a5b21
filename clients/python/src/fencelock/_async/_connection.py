"""Requests that a plain ``execute_command`` cannot carry, on a connection borrowed
from the client's own pool:

- an acquire that waits (``BLOCK``): the connection reads for as long as the wait
  needs, then gets its own socket timeout back (redis-py 8 gives every connection a
  5 s one; a pooled read would time out and redis-py's retry would re-queue the wait
  at the back). An uncontended acquire is one round trip on an idle connection. A
  wait that would hold the pool's last connection tries instead (``_acquire``):
  ``exchange`` tells the work whether the pool has a connection to spare.
- an acquire followed by ``WAIT``: ``WAIT`` counts the replicas that acknowledged the
  writes *of its own connection*, so both must go over the same one;
- the refresher's pipelined ``LOCK.REFRESH`` batches, read with a bound, on a
  connection of the refresher's own (``_compat.dedicated``), so that waiters that fill
  a bounded pool cannot starve the refreshes of the leases already held.

Because the connection comes from the client's pool, it is exactly the client's own
kind of connection: the same address (a Sentinel pool resolves the current master), TLS,
auth, database, protocol and retry policy, and no new TCP connection when one is idle.
On a cluster it comes from the pool of the node that owns the key, and ``MOVED`` /
``ASK`` are followed here, since the cluster client's routing does not see it."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Callable, Optional, TypeVar

from redis.exceptions import AskError, ResponseError, TryAgainError

from .._protocol import Args, Key
from ._compat import (
    abandon_if_cancel_swallowed,
    borrow,
    cancellations,
    raise_if_cancel_swallowed,
    reading_for,
    sleep,
)

T = TypeVar("T")

# As many redirections as redis-py's cluster client follows before giving up.
MAX_REDIRECTS = 5
TRYAGAIN_PAUSE = 0.05


async def exchange(
    client: Any,
    key: Key,
    work: Callable[[Any, bool], Awaitable[T]],
    read_timeout: Callable[[Optional[float], bool], Optional[float]],
) -> T:
    """Runs ``work(connection, spare)`` (commands sent and read on one connection) on
    a pooled connection to ``key``'s server whose reads may take
    ``read_timeout(its own socket timeout, spare)``; ``spare`` says whether the pool
    could still hand out another connection besides this one (a wait decides by it
    whether it may hold the connection for long: ``_acquire``).

    A lost connection is retried by the connection's retry policy, as redis-py
    retries any command: ``work`` must be safe to run again (acquires carry a token,
    and a re-sent wait asks only for the time left)."""
    address: Optional[tuple[str, int]] = None
    asking = False
    redirects = 0
    while True:
        try:
            async with borrow(client, key, address) as (connection, spare):
                return await _with_retry(
                    connection,
                    lambda on: work(on, spare),
                    read_timeout(connection.socket_timeout, spare),
                    asking,
                )
        except (AskError, TryAgainError) as redirect:
            redirects += 1
            if redirects > MAX_REDIRECTS:
                raise
            asking = type(redirect) is AskError
            if isinstance(redirect, AskError):  # MOVED too: it is a subclass of ASK
                address = (redirect.host, int(redirect.port))
            else:
                # A lock moving between nodes answers its waiters TRYAGAIN: ask again.
                await sleep(TRYAGAIN_PAUSE)


async def _with_retry(
    connection: Any,
    work: Callable[[Any], Awaitable[T]],
    timeout: Optional[float],
    asking: bool,
) -> T:
    async def attempt() -> T:
        # Connecting explicitly, also after a lost connection: a Sentinel connection
        # asks the Sentinels for the current master only here (redis-py 8 reconnects
        # on send without asking).
        await connection.connect()
        with reading_for(connection, timeout):
            if asking:
                await command(connection, "ASKING")
            return await work(connection)

    async def reconnect(_error: Exception) -> None:
        await connection.disconnect()

    return await connection.retry.call_with_retry(attempt, reconnect)  # type: ignore[no-any-return]


async def command(connection: Any, *args: Any) -> Any:
    """Sends one command and reads its reply; an error reply is raised."""
    pending = cancellations()
    await connection.send_command(*args)
    await abandon_if_cancel_swallowed(connection, pending)
    return await connection.read_response()


async def pipelined(
    connection: Any, commands: list[Args], read_timeout: Optional[float]
) -> list[Any]:
    """Sends ``commands`` in one write on ``connection`` (the refresher's own) and
    reads every reply (an error reply is returned as its ``ResponseError``), each read
    bounded by ``read_timeout``. Not retried: the refresher tries again at its next
    turn."""
    # Connecting inside the bound too: a reconnect's handshake reads a reply.
    with reading_for(connection, read_timeout):
        await connection.connect()
        await connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await connection.read_response())
            except ResponseError as error:
                replies.append(error)
        return replies


async def batch(client: Any, key: Key, commands: list[Args]) -> tuple[list[Any], bool]:
    """Sends ``commands`` (all of keys in ``key``'s slot) in one write on a connection
    borrowed from the pool of ``key``'s server, and reads every reply (an error reply
    is returned as its ``ResponseError``); with them, whether the commands may have
    been sent before (a lost connection, retried by the connection's retry policy:
    a second release of a key then finds it released by the first). ``MOVED``/``ASK``
    are followed as for ``exchange``; a cancellation that redis-py's I/O swallowed is
    raised again, as by ``_commands.call``."""
    pending = cancellations()
    attempts: list[bool] = []

    async def work(connection: Any, _spare: bool) -> list[Any]:
        attempts.append(True)
        await connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await connection.read_response())
            except ResponseError as error:
                replies.append(error)
        raise_redirect(replies)
        return replies

    replies = await exchange(client, key, work, lambda own, _spare: own)
    raise_if_cancel_swallowed(pending)
    return replies, len(attempts) > 1


def raise_redirect(replies: list[Any]) -> None:
    """A ``MOVED``/``ASK``/``TRYAGAIN`` among the replies of commands of one slot
    (then every one of them has it): raised, so that ``exchange`` follows it."""
    for reply in replies:
        if isinstance(reply, (AskError, TryAgainError)):
            raise reply
