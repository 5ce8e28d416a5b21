"""Facts about a redis-py client that read the same on its sync and asyncio forms: is
it a cluster client, how to ask its pool for a connection on every redis-py version,
how to name the server that owns a key in an error message, and whether keys share a
cluster slot. No I/O."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from redis.exceptions import ClusterCrossSlotError

from ._protocol import Key


def is_cluster(client: Any) -> bool:
    # Duck-typed: redis-py's cluster and plain clients share no base class.
    return hasattr(client, "get_node_from_key")


def is_asyncio(client: Any) -> bool:
    """Whether ``client`` is a ``redis.asyncio`` client (its commands are coroutines).
    Duck-typed like ``is_cluster``, and looked up once per client class."""
    client_class: Any = type(client)
    return _has_coroutine_commands(client_class)


@functools.cache
def _has_coroutine_commands(client_class: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(client_class, "execute_command", None))


def connection_args(pool: Any) -> tuple[Any, ...]:
    """What ``pool.get_connection`` wants: redis-py < 5.3 requires a command name,
    later versions warn when given one. Looked up once per pool class (reading the
    signature through redis-py's deprecation wrapper costs more than the borrow)."""
    pool_class: Any = type(pool)
    return _connection_args(pool_class)


@functools.cache
def _connection_args(pool_class: Any) -> tuple[Any, ...]:
    try:
        signature = inspect.signature(pool_class.get_connection)
        parameter = signature.parameters["command_name"]
    except (AttributeError, KeyError, TypeError, ValueError):
        return ()
    return ("LOCK.ACQUIRE",) if parameter.default is inspect.Parameter.empty else ()


def describe(client: Any, key: Key) -> str:
    """The server the client sends ``key``'s commands to, as an operator names it:
    ``host:port``, a unix socket path, a Sentinel service or a cluster node."""
    if is_cluster(client):
        try:
            node = client.get_node_from_key(key)
        except Exception:  # an uninitialised asyncio cluster client has no nodes yet
            return "the cluster node that owns the key"
        return f"cluster node {node.host}:{node.port}"
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if service is not None:
        return f"the master of Sentinel service {service!r}"
    kwargs = getattr(pool, "connection_kwargs", {})
    if "path" in kwargs:
        return f"unix socket {kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def check_one_slot(client: Any, keys: tuple[Key, ...]) -> None:
    """On a cluster client, keys that hash to several slots raise redis-py's
    ``ClusterCrossSlotError`` (what a ``CROSSSLOT`` reply raises) before anything is
    sent, as redis-py refuses its own multi-key commands (the server answers
    ``CROSSSLOT`` too; this saves the round trip and names no node)."""
    if is_cluster(client) and len({client.keyslot(key) for key in keys}) > 1:
        raise ClusterCrossSlotError("Keys in request don't hash to the same slot")


def node_of(client: Any, key: Key) -> Any:
    """What groups keys that share a server: the cluster node's name, else None."""
    if not is_cluster(client):
        return None
    node = client.get_node_from_key(key)
    return getattr(node, "name", None) or (node.host, node.port)
