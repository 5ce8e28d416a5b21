"""Keeps a ``fencelock.asyncio.Locks`` lease alive from a task: ``LOCK.REFRESH`` every
ttl/3 until stopped, and the loss report when a refresh finds the lock gone.

Stopping does not trust ``Task.cancel()`` alone: on Python 3.11, ``asyncio.wait_for``
(which redis-py wraps around socket I/O when a timeout is set) can swallow a
cancellation that lands as the I/O completes, and the task would go on refreshing.
A stop flag, checked after every await, ends the loop anyway, and ``stop`` cancels
again until the task is done."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable
from typing import Callable, Optional, Union

from redis.exceptions import RedisError

from .lease import Lease

log = logging.getLogger("fencelock")

OnLost = Callable[[Lease], Union[Awaitable[None], None]]

# How often ``stop`` repeats a cancellation that did not end the task.
RECANCEL_INTERVAL = 0.05


class Refresher:
    def __init__(
        self,
        lease: Lease,
        refresh: Callable[[], Awaitable[bool]],
        on_lost: Optional[OnLost],
    ) -> None:
        self.lease = lease
        self._refresh = refresh
        self._on_lost = on_lost
        self._stopping = False
        self._task: Optional[asyncio.Task[None]] = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stops refreshing; returns once the task has ended, so no refresh is in
        flight when the release that follows is sent."""
        self._stopping = True
        task = self._task
        if task is None:
            return
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=RECANCEL_INTERVAL)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            log.error(
                "fencelock: refresher of %r failed", self.lease.key, exc_info=error
            )

    async def _run(self) -> None:
        lease = self.lease
        # A refresh that fails with an error is tried again at the next tick: the
        # lease is still ours until a whole ttl has passed since the last success.
        held_until = lease.acquired_at + lease.ttl
        while not self._stopping:
            await asyncio.sleep(lease.ttl / 3)
            if self._stopping:
                return
            started = time.monotonic()
            try:
                if await self._refresh():
                    held_until = started + lease.ttl
                    continue
            except (RedisError, OSError) as error:
                log.warning("fencelock: refresh of %r failed: %s", lease.key, error)
                if time.monotonic() < held_until:
                    continue
            if not self._stopping:
                await self._report_lost()
            return

    async def _report_lost(self) -> None:
        lease = self.lease
        lease.lost.set()
        log.warning("fencelock: lost the lock %r (fence %d)", lease.key, lease.fence)
        if self._on_lost is None:
            return
        try:
            result = self._on_lost(lease)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("fencelock: on_lost for %r failed", lease.key)
