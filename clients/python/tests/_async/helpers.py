"""What the asyncio tests do that tasks and threads do differently: sleeping, and
calling something later beside the test's own wait. Written by hand on each side
(``tests/_sync/helpers.py`` is the threads' twin, with the same names), as the
package's ``_compat.py``; the tests themselves are generated."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any, Callable, Optional, TypeVar, cast

import fencelock.asyncio

T = TypeVar("T")

# Tasks started by ``later``: kept so that none is collected before it ran.
_pending: set[asyncio.Task[Any]] = set()


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def drop_in(client: Any, name: str, **kwargs: Any) -> fencelock.asyncio.Lock:
    """``client.lock(name, lock_class=fencelock.asyncio.Lock, **kwargs)``, typed as
    the drop-in it returns: redis-py's asyncio annotations name its own ``Lock``."""
    lock: fencelock.asyncio.Lock = client.lock(
        name, lock_class=fencelock.asyncio.Lock, **kwargs
    )
    return lock


async def in_thread(call: Callable[..., T], *args: Any) -> T:
    """Runs the blocking ``call(*args)`` in a thread of its own, so that the loop's
    tasks (the refresher's among them) go on meanwhile."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(call, *args))


def later(seconds: float, call: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Awaits ``call(*args)`` in ``seconds``, in a task beside the caller's."""

    async def run() -> None:
        await asyncio.sleep(seconds)
        await call(*args)

    task = asyncio.get_running_loop().create_task(run())
    _pending.add(task)
    task.add_done_callback(_pending.discard)


def spawn(
    target: Callable[[], Awaitable[Any]],
) -> tuple[asyncio.Task[None], dict[str, Any]]:
    """Runs ``target()`` in a task beside the caller's; its result or exception
    lands in the dict (``"result"``, ``"error"``)."""
    outcome: dict[str, Any] = {}

    async def body() -> None:
        try:
            outcome["result"] = await target()
        except BaseException as error:  # reported by the test
            outcome["error"] = error

    task = asyncio.get_running_loop().create_task(body())
    _pending.add(task)
    task.add_done_callback(_pending.discard)
    return task, outcome


async def join(task: asyncio.Task[None], timeout: float) -> None:
    """Waits up to ``timeout`` seconds for what ``spawn`` started."""
    await asyncio.wait({task}, timeout=timeout)


async def set_within(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` is set within ``timeout`` seconds (as
    ``threading.Event.wait``)."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        return False
    return True


async def next_of(items: AsyncIterator[T]) -> T:
    """The next item of an (asynchronous) iterator: ``next()`` on the threads' side."""
    return await items.__anext__()


async def close_iterator(items: AsyncIterator[Any]) -> None:
    """Closes what ``observe()`` returned (an async generator, annotated as the
    iterator it is to its users)."""
    await cast(AsyncGenerator[Any, None], items).aclose()


def refresher_running(locks: Any) -> bool:
    """Whether the manager's refresher task runs (it ends a while after its last
    lease)."""
    task = locks._refresher._task
    return task is not None and not task.done()


async def until(
    condition: Callable[[], Awaitable[bool]], timeout: float, message: str
) -> None:
    """Waits until ``condition()`` holds; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(0.02)


class Waiter:
    """Acquires ``lock`` (waiting up to 10 s) in a task beside the test and holds it
    until ``leave()``; ``granted`` says once the acquire ended (``result``: True, False
    or the error), and the label goes into ``order`` on a grant."""

    def __init__(self, lock: Any, order: list[str], name: str) -> None:
        self.lock = lock
        self.order = order
        self.label = name
        self.result: Any = None
        self.fence: Any = None
        self._granted = asyncio.Event()
        self._leave = asyncio.Event()
        self._task: Optional[asyncio.Task[None]] = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            self.result = await self.lock.acquire(blocking_timeout=10)
            self.fence = self.lock.fence
            self.order.append(self.label)
        except Exception as error:
            self.result = error
        self._granted.set()
        if self.result is True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._leave.wait(), 10)
            await self.lock.release()

    async def granted(self, timeout: float) -> bool:
        """Whether the acquire ends within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._granted.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def is_granted(self) -> bool:
        return self._granted.is_set()

    def leave(self) -> None:
        self._leave.set()

    async def join(self, timeout: float) -> None:
        assert self._task is not None
        await asyncio.wait({self._task}, timeout=timeout)
