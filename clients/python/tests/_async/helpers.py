"""What the asyncio tests do that tasks and threads do differently: sleeping, and
calling something later beside the test's own wait. Written by hand on each side
(``tests/_sync/helpers.py`` is the threads' twin, with the same names), as the
package's ``_compat.py``; the tests themselves are generated."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, Callable

# Tasks started by ``later``: kept so that none is collected before it ran.
_pending: set[asyncio.Task[Any]] = set()


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


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


async def until(
    condition: Callable[[], Awaitable[bool]], timeout: float, message: str
) -> None:
    """Waits until ``condition()`` holds; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(0.02)
