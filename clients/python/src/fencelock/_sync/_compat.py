"""What threads do differently from asyncio, for the modules generated from
``fencelock._async`` (see ``fencelock/_async/_compat.py``, the asyncio side of this
file). Written by hand: here shielding and cancellation are no-ops, locks keep their
tokens per thread, and a long read sets the socket's own timeout."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any, Callable, Optional, TypeVar

from redis import BlockingConnectionPool
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._protocol import Key
from .._servers import connection_args, is_asyncio, is_cluster

T = TypeVar("T")

Event = threading.Event
sleep = time.sleep
# A manager used before ``os.fork()`` starts clean in the child: threads and sockets
# are made anew there (``Locks._after_fork``).
SURVIVES_FORK = True


def check_client(client: Any, what: str) -> None:
    """``fencelock.<what>`` runs its commands at once: with a ``redis.asyncio``
    client each call would only make a coroutine, whose errors (a ``STALE``
    refusal, an unknown command) would surface raw, untranslated, wherever it is
    awaited. Refused here, naming the asyncio twin."""
    if is_asyncio(client):
        kind = type(client)
        raise TypeError(
            f"fencelock.{what} needs a sync redis-py client, not the asyncio"
            f" {kind.__module__}.{kind.__qualname__}: use fencelock.asyncio.{what}"
            " (awaited)"
        )


def new_local(per_task: bool) -> Any:
    """Where a lock keeps its token: per thread (a thread is the task here)."""
    return threading.local()


def current_owner() -> object:
    return threading.get_ident()


def ready(client: Any) -> None:
    """A sync cluster client knows its nodes from its construction on."""


def dedicated(client: Any, key: Key) -> Any:
    """A connection of its own to ``key``'s server, built as the client's pool builds
    its connections (see the asyncio side)."""
    if is_cluster(client):
        node = client.get_node_from_key(key)
        pool = client.get_redis_connection(node).connection_pool
    else:
        pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    # No retries of its own (see the asyncio side).
    kwargs["retry"] = Retry(NoBackoff(), 0)
    return pool.connection_class(**kwargs)


@contextlib.contextmanager
def borrow(
    client: Any, key: Key, address: Optional[tuple[str, int]] = None
) -> Iterator[tuple[Any, bool]]:
    """A connection from the client's own pool for ``key``'s server (or the cluster
    node at ``address``), given back afterwards, and whether the pool could still
    hand out another one (see the asyncio side)."""
    if is_cluster(client):
        if address is None:
            node = client.get_node_from_key(key)
        else:
            node = client.get_node(host=address[0], port=address[1])
        if node is None:
            raise LookupError(f"no cluster node at {address}")
        pool = client.get_redis_connection(node).connection_pool
    else:
        pool = client.connection_pool
    connection = pool.get_connection(*connection_args(pool))
    try:
        yield connection, _pool_has_spare(pool)
    finally:
        pool.release(connection)


def _pool_has_spare(pool: Any) -> bool:
    """Whether ``pool`` could hand out one more connection now: an idle one, or room
    to make one. Read from redis-py's own bookkeeping (the same on redis-py 5 to 8;
    the sync pools have no public question for it); a pool this cannot read counts
    as having room."""
    if isinstance(pool, BlockingConnectionPool):
        # Its queue holds the idle connections and a None for each it may still make.
        queue = getattr(pool, "pool", None)
        return queue is None or queue.qsize() > 0
    idle = getattr(pool, "_available_connections", None)
    made = getattr(pool, "_created_connections", None)
    most = getattr(pool, "max_connections", None)
    if idle is None or made is None or most is None:
        return True
    return bool(idle) or made < most


@contextlib.contextmanager
def reading_for(connection: Any, seconds: Optional[float]) -> Generator[None]:
    """Lets ``connection`` wait ``seconds`` (None: without limit) for each reply,
    then restores its own socket timeout. The attribute covers a reconnect, the
    socket itself the connection as it is."""
    own = connection.socket_timeout
    connection.socket_timeout = seconds
    sock = getattr(connection, "_sock", None)
    if sock is not None:
        sock.settimeout(seconds)
    try:
        yield
    finally:
        connection.socket_timeout = own
        sock = getattr(connection, "_sock", None)
        if sock is not None:
            sock.settimeout(own)


def shielded(result: T) -> T:
    """A thread is not cancelled: the work has already run to its end."""
    return result


def cancellations() -> int:
    return 0


def raise_if_cancel_swallowed(before: int) -> None:
    """Threads are not cancelled."""


def abandon_if_cancel_swallowed(connection: Any, before: int) -> None:
    """Threads are not cancelled."""


def block_runner(cancel_on_lost: bool) -> None:
    if cancel_on_lost:
        raise ValueError("cancel_on_lost needs asyncio: a thread cannot be cancelled")


def cancel(task: Any) -> None:
    """Never called: ``block_runner`` gives no task to cancel."""


def is_own_cancel(error: Optional[BaseException], task: Any) -> bool:
    return False


def call_back(function: Callable[..., Any], *args: Any) -> None:
    function(*args)


# What ``ensure_held`` returns: nothing here (an awaitable on asyncio).
Checked = Optional[None]


def checked() -> None:
    return None


def entering(result: T) -> T:
    """``Election.campaign`` on threads: the campaign ran already; its result (a
    ``Leadership``, a context manager itself). asyncio's twin returns an awaitable that
    can also be entered at once."""
    return result
