"""``fencelock.asyncio.Locks``: the lock manager for asyncio, shaped like the code that
people write by hand (``SET NX EX``, Lua release and refresh, a polling loop and a
refresher task), without the polling.

    locks = Locks(redis.asyncio.from_url(url))
    async with locks.lock("daily-notif", ttl=60, wait=0, auto_refresh=True) as lease:
        ...  # lease.token, lease.fence, lease.lost (asyncio.Event), lease.ensure_held()

Behaviour as ``fencelock.Locks`` (see ``fencelock.locks``; ``shared`` and ``limit``
too), with a task instead of a thread refreshing every ttl/3. Cancelling the block (a
timeout, a ``TaskGroup`` being cancelled) still stops the refresher and releases the
lock; the release runs to its end even if the caller is cancelled again meanwhile.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Optional

from .._protocol import Token, new_token, parse_flag, refresh_args, release_args, to_ms
from ..errors import LockNotAcquired
from ..info import LockInfo
from . import _acquire
from ._cleanup import shielded
from ._refresher import OnLost, Refresher
from .info import lock_info
from .lease import Lease

if TYPE_CHECKING:
    from .._types import AsyncClient


class Locks:
    """Locks on one server or cluster that has the fencelock module loaded; every lock
    name gets ``prefix`` (default ``lock:``) in front to make its key."""

    def __init__(self, client: AsyncClient, prefix: str = "lock:") -> None:
        self.client = client
        self.prefix = prefix

    def key(self, name: str) -> str:
        return self.prefix + name

    @contextlib.asynccontextmanager
    async def lock(
        self,
        name: str,
        ttl: float,
        *,
        wait: Optional[float] = 0,
        shared: bool = False,
        limit: Optional[int] = None,
        auto_refresh: bool = True,
        min_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        token: Optional[Token] = None,
        wait_replicas: int = 0,
        wait_replicas_timeout: float = 1.0,
    ) -> AsyncIterator[Lease]:
        """Holds the lock while the block runs; see the module docstring."""
        lease = await self.acquire(
            name,
            ttl,
            wait=wait,
            shared=shared,
            limit=limit,
            token=token,
            wait_replicas=wait_replicas,
            wait_replicas_timeout=wait_replicas_timeout,
        )
        refresher = None
        if auto_refresh:
            refresher = Refresher(lease, lambda: self.refresh(lease), on_lost)
            refresher.start()
        try:
            yield lease
        finally:
            await shielded(self._leave_after(refresher, lease, min_hold))

    async def acquire(
        self,
        name: str,
        ttl: float,
        *,
        wait: Optional[float] = 0,
        shared: bool = False,
        limit: Optional[int] = None,
        token: Optional[Token] = None,
        wait_replicas: int = 0,
        wait_replicas_timeout: float = 1.0,
    ) -> Lease:
        """Takes the lock (no refresher: see ``lock``); ``LockNotAcquired`` if busy for
        the whole ``wait``; ``shared``, ``limit`` and ``wait_replicas`` as for
        ``fencelock.Locks.acquire``."""
        key = self.key(name)
        token = new_token() if token is None else token
        fence = await _acquire.acquire(
            self.client,
            key,
            token,
            ttl_ms=to_ms(ttl),
            wait=wait,
            wait_replicas=wait_replicas,
            replicas_timeout=wait_replicas_timeout,
            shared=shared,
            limit=limit,
        )
        if fence is None:
            raise LockNotAcquired(key)
        return Lease(
            key,
            token,
            fence,
            ttl,
            acquired_at=time.monotonic(),
            shared=shared or limit is not None,
            limit=limit,
            client=self.client,
        )

    async def refresh(self, lease: Lease, ttl: Optional[float] = None) -> bool:
        """Restarts the lease at ``ttl`` (default: the lease's own) from now; False if
        the token no longer holds the lock."""
        return await self._refresh_ms(lease, to_ms(lease.ttl if ttl is None else ttl))

    async def release(self, lease: Lease) -> bool:
        """Releases the lock if this lease still holds it; ``lease.released`` says."""
        reply = await self.client.execute_command(*release_args(lease.key, lease.token))
        lease.released = parse_flag(reply)
        return lease.released

    async def leave(self, lease: Lease, min_hold: Optional[float] = None) -> None:
        """Releases the lock, or cuts the lease to what is left of ``min_hold``."""
        hold_ms = lease.hold_left_ms(min_hold, time.monotonic())
        if hold_ms > 0:
            await self._refresh_ms(lease, hold_ms)
        else:
            await self.release(lease)

    async def info(self, name: str) -> Optional[LockInfo]:
        """``LOCK.INFO`` of the lock ``name`` as a dict (None: free, nobody waits)."""
        return await lock_info(self.client, self.key(name))

    async def _refresh_ms(self, lease: Lease, ttl_ms: int) -> bool:
        args = refresh_args(lease.key, lease.token, ttl_ms)
        return parse_flag(await self.client.execute_command(*args))

    async def _leave_after(
        self, refresher: Optional[Refresher], lease: Lease, min_hold: Optional[float]
    ) -> None:
        # The refresher must be gone before the release, or a refresh in flight could
        # arrive after it and find (and report) the lock lost.
        if refresher is not None:
            await refresher.stop()
        await self.leave(lease, min_hold)
