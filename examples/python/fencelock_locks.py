"""A small asyncio helper for fencelock locks with redis-py.

    locks = Locks(redis.asyncio.Redis())
    async with locks.lock("daily-notif", ttl_ms=60_000) as lease:
        ...  # lease.token, lease.fence; lease.lost is set if the lease ran out

On entry it acquires the lock (waiting up to ``block_ms`` in the server's FIFO queue if
given, else failing at once with ``LockNotAcquired``). While the body runs, a background
task refreshes the lease every ttl/3. If a refresh returns 0 the lock is gone (expired,
deleted or taken over): refreshing stops, ``lease.lost`` is set, a warning is logged and
``on_lost(lease)`` is called. The lock is released in ``finally``, whatever happened.

The body is not cancelled when the lock is lost: only it knows what is safe to abort.
Check ``lease.lost`` (or call ``lease.ensure_held()``) before irreversible steps, and
pass ``lease.fence`` to the resource you write so it can refuse a stale holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable, Optional, Union

import redis.asyncio as redis
from redis.exceptions import RedisError

log = logging.getLogger("fencelock")

Token = Union[str, bytes]


class LockNotAcquired(Exception):
    """The lock was held by someone else (and ``block_ms`` ran out, if given)."""


class LockLost(Exception):
    """The lease ran out or the lock was taken while the holder was still working."""


@dataclass
class Lease:
    key: str
    token: Token
    fence: int
    ttl_ms: int
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    released: bool = False

    def ensure_held(self) -> None:
        """Raises ``LockLost`` if a refresh found the lock gone."""
        if self.lost.is_set():
            raise LockLost(self.key)


class Locks:
    """Locks on one Redis server (or cluster client) with the fencelock module."""

    def __init__(self, client: redis.Redis, prefix: str = "lock:") -> None:
        self.client = client
        self.prefix = prefix

    @contextlib.asynccontextmanager
    async def lock(
        self,
        name: str,
        ttl_ms: int,
        *,
        block_ms: Optional[int] = None,
        token: Optional[str] = None,
        on_lost: Optional[Callable[[Lease], Union[None, Awaitable[None]]]] = None,
    ) -> AsyncIterator[Lease]:
        lease = await self.acquire(name, ttl_ms, block_ms=block_ms, token=token)
        refresher = asyncio.create_task(self._keep_alive(lease, on_lost))
        try:
            yield lease
        finally:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
            lease.released = await self.release(lease)

    async def acquire(
        self,
        name: str,
        ttl_ms: int,
        *,
        block_ms: Optional[int] = None,
        token: Optional[str] = None,
    ) -> Lease:
        key = self.prefix + name
        args: list = ["LOCK.ACQUIRE", key, ttl_ms]
        if token is not None:
            args += ["TOKEN", token]
        if block_ms is not None:
            args += ["BLOCK", block_ms]
        reply = await self.client.execute_command(*args)
        if reply is None:
            raise LockNotAcquired(key)
        granted, fence = reply
        return Lease(key=key, token=granted, fence=int(fence), ttl_ms=ttl_ms)

    async def refresh(self, lease: Lease) -> bool:
        reply = await self.client.execute_command(
            "LOCK.REFRESH", lease.key, lease.token, lease.ttl_ms
        )
        return reply == 1

    async def release(self, lease: Lease) -> bool:
        reply = await self.client.execute_command("LOCK.RELEASE", lease.key, lease.token)
        return reply == 1

    async def _keep_alive(self, lease: Lease, on_lost) -> None:
        """Refreshes every ttl/3 until cancelled or until the lock is found gone. A
        refresh that fails with an error is retried at the next tick; once the last
        successful refresh is a whole ttl old, the lease has ended on the server too."""
        loop = asyncio.get_running_loop()
        interval = lease.ttl_ms / 3000
        expires_at = loop.time() + lease.ttl_ms / 1000
        while True:
            await asyncio.sleep(interval)
            started = loop.time()
            try:
                if await self.refresh(lease):
                    expires_at = started + lease.ttl_ms / 1000
                    continue
            except (RedisError, OSError) as error:
                log.warning("fencelock: refresh of %s failed: %s", lease.key, error)
                if loop.time() < expires_at:
                    continue
            await self._report_lost(lease, on_lost)
            return

    @staticmethod
    async def _report_lost(lease: Lease, on_lost) -> None:
        lease.lost.set()
        log.warning("fencelock: lost the lock %s (fence %d)", lease.key, lease.fence)
        if on_lost is not None:
            result = on_lost(lease)
            if asyncio.iscoroutine(result):
                await result
