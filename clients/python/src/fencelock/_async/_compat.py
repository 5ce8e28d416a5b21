"""What asyncio does differently from threads, for the modules generated from this
folder (``scripts/unasync.py`` turns them into ``fencelock._sync``; this file and
``_refresher.py`` are written by hand on both sides).

- borrowing a pooled connection from a plain, Sentinel or cluster client and reading
  from it for longer than its socket timeout;
- work that a cancellation must not cut short (``shielded``), and cancellations that
  redis-py's I/O swallowed (Python 3.11's ``asyncio.wait_for``);
- the task that runs a block (``cancel_on_lost``), task-local tokens, events;
- callbacks that may be coroutines."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import typing
from collections.abc import AsyncIterator, Awaitable, Coroutine, Generator
from typing import Any, Callable, Optional, TypeVar

from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .._protocol import Key
from .._servers import connection_args, is_asyncio, is_cluster
from .._tasklocal import TaskLocal

T = TypeVar("T")
E = TypeVar("E", bound="contextlib.AbstractAsyncContextManager[Any]")

Event = asyncio.Event
sleep = asyncio.sleep
# A manager used before ``os.fork()`` cannot go on in the child: its event loop, its
# tasks and its connections are the parent's (``Locks._after_fork``).
SURVIVES_FORK = False

# The event loop keeps only weak references to tasks: these must not vanish midway.
_running: set[asyncio.Future[Any]] = set()


def check_client(client: Any, what: str) -> None:
    """``fencelock.asyncio.<what>`` awaits its commands: a sync client would answer
    with a result where an awaitable is due, a TypeError far from its cause. Refused
    here, naming the sync twin, as redis-py keeps its sync and asyncio APIs apart."""
    if not is_asyncio(client):
        kind = type(client)
        raise TypeError(
            f"fencelock.asyncio.{what} needs a redis.asyncio client, not a"
            f" {kind.__module__}.{kind.__qualname__}: for a sync client use"
            f" fencelock.{what}"
        )


def new_local(per_task: bool) -> Any:
    """Where a lock keeps its token: per task, or (as redis-py's asyncio lock) per
    thread, so that ``wait_for(lock.acquire(), t)`` on Python < 3.12 still works."""
    return TaskLocal() if per_task else threading.local()


def current_owner() -> object:
    """Who holds a lock object's token here: the running task."""
    return asyncio.current_task()


async def ready(client: Any) -> None:
    """Makes a cluster client know its nodes (an asyncio one learns them on its first
    command), so that the node of a key can be looked up."""
    if is_cluster(client):
        await client.initialize()


def dedicated(client: Any, key: Key) -> Any:
    """A connection of its own to ``key``'s server, built as the client's pool builds
    its connections (the same class and arguments: a Sentinel connection resolves the
    master through its pool). The refresher keeps one per server, so that waiters
    filling a bounded pool cannot starve its refreshes."""
    if is_cluster(client):
        node = client.get_node_from_key(key)
        kind, kwargs = node.connection_class, dict(node.connection_kwargs)
    else:
        pool = client.connection_pool
        kind, kwargs = pool.connection_class, dict(pool.connection_kwargs)
    # No retries of its own: a refresh that fails is sent again on schedule, and a
    # retried connect could outlast the deadline it was meant to save.
    kwargs["retry"] = Retry(NoBackoff(), 0)
    return kind(**kwargs)


@contextlib.asynccontextmanager
async def borrow(
    client: Any, key: Key, address: Optional[tuple[str, int]] = None
) -> AsyncIterator[tuple[Any, bool]]:
    """A connection from the client's own pool for ``key``'s server (or the cluster
    node at ``address``), given back afterwards: the same kind of connection, with
    the same address resolution (Sentinel), TLS, auth and retry policy, as the
    client's commands use, and no new TCP connection when one is idle. With it,
    whether the pool could still hand out another connection (``spare``): see
    ``_acquire`` for why a wait must not hold the last one."""
    if is_cluster(client):
        await client.initialize()
        if address is None:
            node = client.get_node_from_key(key)
        else:
            node = client.get_node(host=address[0], port=address[1])
        if node is None:
            raise LookupError(f"no cluster node at {address}")
        connection = node.acquire_connection()
        try:
            yield connection, _node_has_spare(node)
        finally:
            if hasattr(node, "release"):
                node.release(connection)
            else:  # redis-py < 6
                node._free.append(connection)
        return
    pool = client.connection_pool
    connection = await pool.get_connection(*connection_args(pool))
    try:
        yield connection, _pool_has_spare(pool)
    finally:
        await pool.release(connection)


def _pool_has_spare(pool: Any) -> bool:
    """Whether ``pool`` (a ``ConnectionPool``, ``BlockingConnectionPool`` or Sentinel
    pool, all asyncio) could hand out one more connection now: an idle one, or room
    to make one. A pool this cannot read counts as having room."""
    can_get = getattr(pool, "can_get_connection", None)
    return True if can_get is None else bool(can_get())


def _node_has_spare(node: Any) -> bool:
    """The same for an asyncio cluster node, which keeps its own connections."""
    free = getattr(node, "_free", None)
    made = getattr(node, "_connections", None)
    most = getattr(node, "max_connections", None)
    if free is None or made is None or most is None:
        return True
    return bool(free) or len(made) < most


@contextlib.contextmanager
def reading_for(connection: Any, seconds: Optional[float]) -> Generator[None]:
    """Lets ``connection`` wait ``seconds`` (None: without limit) for each reply,
    then restores its own socket timeout."""
    own = connection.socket_timeout
    connection.socket_timeout = seconds
    try:
        yield
    finally:
        connection.socket_timeout = own


async def shielded(work: Awaitable[T]) -> T:
    """Awaits ``work`` to the end even if the caller is cancelled meanwhile (the
    caller then sees its ``CancelledError`` at once; the work goes on)."""
    task = asyncio.ensure_future(work)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return await asyncio.shield(task)


def cancellations() -> int:
    """How many cancellations of the current task are pending (Python >= 3.11)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def raise_if_cancel_swallowed(before: int) -> None:
    """Re-raises a cancellation that arrived since ``before`` but was swallowed below
    us: Python 3.11's ``asyncio.wait_for``, which redis-py wraps around every send
    when a socket timeout is set, drops a cancel that lands as the send completes.
    Without this a timeout around an acquire could be lost, and the block would run
    unbounded. (Python < 3.11 cannot tell; there it is a no-op.)"""
    if cancellations() > before:
        raise asyncio.CancelledError


async def abandon_if_cancel_swallowed(connection: Any, before: int) -> None:
    """After a send: a cancellation swallowed as it completed (see
    ``raise_if_cancel_swallowed``) is raised now, not after a read that may wait for
    the whole ``BLOCK``. Its reply is still to come, so the connection is closed (the
    server takes the wait out of its queues when it goes)."""
    if cancellations() > before:
        await connection.disconnect(nowait=True)
        raise asyncio.CancelledError


def block_runner(cancel_on_lost: bool) -> Optional[asyncio.Task[Any]]:
    """The task to cancel when its lease is lost, if asked for."""
    return asyncio.current_task() if cancel_on_lost else None


def cancel(task: Any) -> None:
    task.cancel()


def is_own_cancel(error: Optional[BaseException], task: Any) -> bool:
    """Whether ``error`` is the cancellation ``cancel`` sent to ``task``; if so the
    request is withdrawn (``uncancel``), so that an enclosing ``timeout`` or
    ``TaskGroup`` does not mistake it for its own."""
    if task is None or not isinstance(error, asyncio.CancelledError):
        return False
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None and task.cancelling():
        uncancel()
    return True


async def call_back(function: Callable[..., Any], *args: Any) -> None:
    """Calls a user callback, awaiting it if it is a coroutine function."""
    result = function(*args)
    if inspect.isawaitable(result):
        await result


class _Done:
    """An awaitable that is already done: what ``ensure_held()`` returns when it
    needs no round trip, so that it works awaited or not."""

    def __await__(self) -> Generator[None]:
        return
        yield


Checked = Awaitable[None]


def checked() -> Checked:
    return _Done()


class Entering(typing.Coroutine[Any, Any, E]):
    """What ``Election.campaign`` returns on asyncio: ``await`` it for its result, or
    enter it at once (``async with election.campaign(v) as leadership:``), which
    awaits it and enters the result (a context manager whose ``__aenter__`` gives
    itself). A coroutine itself, so ``asyncio.create_task`` and task groups take it.
    On threads the call returns the result itself."""

    def __init__(self, work: Coroutine[Any, Any, E]) -> None:
        self._work = work
        self._entered: Optional[E] = None

    def __await__(self) -> Generator[Any, None, E]:
        return self._work.__await__()

    def send(self, value: Any) -> Any:
        return self._work.send(value)

    def throw(self, *args: Any) -> Any:
        return self._work.throw(*args)

    def close(self) -> None:
        self._work.close()

    async def __aenter__(self) -> E:
        entered = self._entered = await self._work
        await entered.__aenter__()
        return entered

    async def __aexit__(self, *exc_info: Any) -> Optional[bool]:
        if self._entered is None:
            return None
        return await self._entered.__aexit__(*exc_info)


def entering(work: Coroutine[Any, Any, E]) -> Entering[E]:
    return Entering(work)
