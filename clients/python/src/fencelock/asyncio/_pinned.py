"""A connection of our own to the server that owns a key, for asyncio clients: a
``BLOCK`` wait longer than the client's socket timeout, and an acquire followed by
``WAIT`` on the same connection. The sync twin, ``fencelock._pinned``, explains why."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from redis.exceptions import AskError, TryAgainError

from .._pinned import MAX_REDIRECTS, TRYAGAIN_PAUSE, is_cluster
from .._protocol import Key

if TYPE_CHECKING:
    from redis.asyncio.connection import AbstractConnection

    from .._types import AsyncClient

T = TypeVar("T")
Exchange = Callable[["AbstractConnection"], Awaitable[T]]


async def endpoint(client: AsyncClient, key: Key) -> tuple[Any, dict[str, Any]]:
    """The connection class and arguments the client uses for ``key``'s server."""
    # Duck-typed: redis-py's cluster and plain clients share no base class.
    any_client: Any = client
    if is_cluster(client):
        await any_client.initialize()
        node = any_client.get_node_from_key(key)
        return node.connection_class, dict(node.connection_kwargs)
    pool = any_client.connection_pool
    return pool.connection_class, dict(pool.connection_kwargs)


async def socket_timeout(client: AsyncClient, key: Key) -> Optional[float]:
    """The read timeout of the client's connections to ``key``'s server."""
    timeout: Optional[float] = (await endpoint(client, key))[1].get("socket_timeout")
    return timeout


async def call(
    client: AsyncClient,
    key: Key,
    exchange: Exchange[T],
    read_timeout: Optional[float],
) -> T:
    """Runs ``exchange`` on a fresh connection to ``key``'s server that reads with
    ``read_timeout`` (None: no limit), following cluster redirections; a lost
    connection is retried by the client's retry policy (``exchange`` must be safe to
    run again)."""
    connection_class, kwargs = await endpoint(client, key)
    kwargs["socket_connect_timeout"] = kwargs.get(
        "socket_connect_timeout"
    ) or kwargs.get("socket_timeout")
    kwargs["socket_timeout"] = read_timeout
    asking = False
    redirects = 0
    while True:
        try:
            return await _run(connection_class(**kwargs), exchange, asking)
        except (AskError, TryAgainError) as redirect:
            redirects += 1
            if redirects > MAX_REDIRECTS:
                raise
            asking = type(redirect) is AskError
            if isinstance(redirect, AskError):  # MOVED too: it is a subclass of ASK
                kwargs["host"], kwargs["port"] = redirect.host, redirect.port
            else:
                await asyncio.sleep(TRYAGAIN_PAUSE)


async def _run(connection: Any, exchange: Exchange[T], asking: bool) -> T:
    async def attempt() -> T:
        if asking:
            await command(connection, "ASKING")
        return await exchange(connection)

    async def reconnect(_error: Exception) -> None:
        await connection.disconnect()

    try:
        return await connection.retry.call_with_retry(attempt, reconnect)  # type: ignore[no-any-return]
    finally:
        # Also on cancellation: closing the socket takes us out of the server's queue.
        await connection.disconnect()


async def command(connection: AbstractConnection, *args: Any) -> Any:
    """Sends one command and reads its reply; an error reply is raised."""
    await connection.send_command(*args)
    return await connection.read_response()
