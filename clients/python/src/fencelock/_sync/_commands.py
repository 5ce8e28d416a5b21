# Generated from fencelock/_async/_commands.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Every ``LOCK.*`` command that needs no connection of its own goes through ``call``:
the client's ``execute_command`` (so a cluster client routes it), a server without the
module reported as ``ModuleNotLoaded`` instead of an "unknown command" that repeats
the token, and a cancellation that redis-py's I/O swallowed raised again."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from typing import Any, Callable, Optional, TypeVar

from redis.exceptions import ConnectionError, RedisError, ResponseError, TimeoutError

from .._protocol import Key, Token, release_args
from .._servers import describe, is_cluster
from ..errors import ModuleNotLoaded, ServerUnavailable
from ._compat import cancellations, raise_if_cancel_swallowed

T = TypeVar("T")


def call(client: Any, key: Key, *args: Any) -> Any:
    """Runs one command for the lock (or mark) ``key``; its reply."""
    pending = cancellations()
    try:
        reply = client.execute_command(*args)
    except ResponseError as error:
        missing = module_missing(client, key, args, error)
        if missing is None:
            raise
    else:
        raise_if_cancel_swallowed(pending)
        return reply
    # Raised outside the handler: the server's message, which repeats the arguments
    # (the token among them), must not ride along as ``__context__``.
    raise missing


def on_server_of(client: Any, key: Key, *args: Any) -> Any:
    """Runs a command that names no key (``LOCK.KEEPALIVE``, ``LOCK.CLOSE``) on the
    server of ``key``: on a cluster, the node that owns its slot now. A cancellation
    that redis-py's I/O swallowed is raised again, as by ``call``."""
    pending = cancellations()
    if is_cluster(client):
        node = client.get_node_from_key(key)
        reply = client.execute_command(*args, target_nodes=node)
    else:
        reply = client.execute_command(*args)
    raise_if_cancel_swallowed(pending)
    return reply


def reaching(client: Any, key: Key, work: Callable[[], T]) -> T:
    """``work``'s outcome, a call of the lock ``key``; a server that could not be
    reached, or did not answer in time, raises ``ServerUnavailable`` (a ``LockError``
    and the redis-py ``ConnectionError`` it stands for), as every lock call does."""
    try:
        return work()
    except ServerUnavailable:
        raise
    except (ConnectionError, TimeoutError) as error:
        raise ServerUnavailable(key, describe(client, key), error) from error


def module_missing(
    client: Any, key: Key, args: tuple[Any, ...], error: ResponseError
) -> Optional[ModuleNotLoaded]:
    return ModuleNotLoaded.from_reply(str(args[0]), describe(client, key), error)


def release_quietly(client: Any, key: Key, token: Token) -> None:
    """Best effort: the server may be unreachable, which is why we are here."""
    with contextlib.suppress(RedisError, OSError):
        client.execute_command(*release_args(key, token))


def release_all_quietly(client: Any, keys: tuple[Key, ...], token: Token) -> None:
    """``release_quietly`` of each key: the holdings of one ``LOCK.ACQUIREALL`` are
    released one by one (``LOCK.RELEASE`` each), whatever happens to the others."""
    for key in keys:
        release_quietly(client, key, token)
