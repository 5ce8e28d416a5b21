"""A connection of our own to the server that owns a key, for the two requests a pooled
connection cannot carry:

- a ``BLOCK`` wait longer than the client's socket timeout (redis-py 8 defaults to 5 s):
  a pooled connection would time out, and redis-py's retry would re-send the acquire
  at the back of the queue. This one reads with a timeout that covers the wait.
- an acquire followed by ``WAIT``: ``WAIT`` counts the replicas that acknowledged the
  writes *of its own connection*, so both must go over the same one.

The connection is built from the client's own connection class and arguments
(address, TLS, auth, retry policy), so it is the same kind of connection as the pooled
ones. On a cluster it goes to the node that owns the key's slot and follows ``MOVED``
and ``ASK`` itself, since the cluster client's routing does not see it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from redis.exceptions import AskError, TryAgainError

from ._protocol import Key

if TYPE_CHECKING:
    from redis.connection import AbstractConnection

    from ._types import SyncClient

T = TypeVar("T")

# As many redirections as redis-py's cluster client follows before giving up.
MAX_REDIRECTS = 5
TRYAGAIN_PAUSE = 0.05


def is_cluster(client: Any) -> bool:
    return hasattr(client, "get_node_from_key")


def endpoint(client: SyncClient, key: Key) -> tuple[Any, dict[str, Any]]:
    """The connection class and arguments the client uses for ``key``'s server."""
    # Duck-typed: redis-py's cluster and plain clients share no base class.
    any_client: Any = client
    if is_cluster(client):
        pool = any_client.get_node_from_key(key).redis_connection.connection_pool
    else:
        pool = any_client.connection_pool
    return pool.connection_class, dict(pool.connection_kwargs)


def socket_timeout(client: SyncClient, key: Key) -> Optional[float]:
    """The read timeout of the client's connections to ``key``'s server."""
    timeout: Optional[float] = endpoint(client, key)[1].get("socket_timeout")
    return timeout


def call(
    client: SyncClient,
    key: Key,
    exchange: Callable[[AbstractConnection], T],
    read_timeout: Optional[float],
) -> T:
    """Runs ``exchange`` (commands sent and read on one connection) on a fresh
    connection to ``key``'s server that reads with ``read_timeout`` (None: no limit).

    A lost connection is retried by the client's own retry policy, as redis-py retries
    any command: ``exchange`` must be safe to run again (acquires carry a token)."""
    connection_class, kwargs = endpoint(client, key)
    # The connect timeout stays what the client chose (redis-py falls back to the
    # socket timeout when it is unset): only reads may wait longer.
    kwargs["socket_connect_timeout"] = kwargs.get(
        "socket_connect_timeout"
    ) or kwargs.get("socket_timeout")
    kwargs["socket_timeout"] = read_timeout
    asking = False
    redirects = 0
    while True:
        try:
            return _run(connection_class(**kwargs), exchange, asking)
        except (AskError, TryAgainError) as redirect:
            redirects += 1
            if redirects > MAX_REDIRECTS:
                raise
            asking = type(redirect) is AskError
            if isinstance(redirect, AskError):  # MOVED too: it is a subclass of ASK
                kwargs["host"], kwargs["port"] = redirect.host, redirect.port
            else:
                # A lock moving between nodes answers its waiters TRYAGAIN: ask again.
                time.sleep(TRYAGAIN_PAUSE)


def _run(connection: Any, exchange: Callable[[Any], T], asking: bool) -> T:
    def attempt() -> T:
        if asking:
            command(connection, "ASKING")
        return exchange(connection)

    try:
        return connection.retry.call_with_retry(  # type: ignore[no-any-return]
            attempt, lambda _error: connection.disconnect()
        )
    finally:
        connection.disconnect()


def command(connection: AbstractConnection, *args: Any) -> Any:
    """Sends one command and reads its reply; an error reply is raised."""
    connection.send_command(*args)
    return connection.read_response()
