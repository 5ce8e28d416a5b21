"""``fencelock.Locks``: the lock manager for threads (``fencelock.asyncio.Locks`` is the
asyncio one, with the same behaviour).

    locks = Locks(redis.Redis.from_url(url))
    with locks.lock("daily-notif", ttl=60, wait=0, min_hold=30) as lease:
        ...  # lease.token, lease.fence, lease.lost (a threading.Event), ensure_held()

On entry it acquires ``<prefix><name>``: ``wait=0`` fails at once with
``LockNotAcquired`` when busy, ``wait>0`` waits that many seconds in the server's FIFO
queue, ``wait=None`` without limit. While the block runs, a thread refreshes the lease
every ttl/3 (``auto_refresh=False`` turns it off); when a refresh finds the lock gone,
refreshing stops, ``lease.lost`` is set and ``on_lost(lease)`` is called. On leaving
(also by an exception) the refresher stops and the lock is released, unless
``min_hold`` seconds have not passed since the grant: then the lease is cut to what is
left of ``min_hold``, so that a second server whose clock runs late does not run the
same scheduled job again.

``shared=True`` holds the lock as one of any number of readers (while no exclusive
holder has it), ``limit=n`` as one of at most n holders (a semaphore):

    with locks.lock("payment-api", ttl=30, limit=5, wait=10) as lease:
        ...  # one of 5 permits; its own token, fence, lease, refresher and lost event

Each holder has its own lease, refreshed and reported lost on its own. Waiting is one
FIFO queue across modes: a reader never overtakes a queued writer. Asking in another
mode than the lock's holders (another ``limit``, ``shared`` on a semaphore) raises
``WrongMode``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

from . import _acquire
from ._protocol import Token, new_token, parse_flag, refresh_args, release_args, to_ms
from ._refresher import OnLost, Refresher
from .errors import LockNotAcquired
from .info import LockInfo, lock_info
from .lease import Lease

if TYPE_CHECKING:
    from ._types import SyncClient


class Locks:
    """Locks on one server or cluster that has the fencelock module loaded; every lock
    name gets ``prefix`` (default ``lock:``) in front to make its key."""

    def __init__(self, client: SyncClient, prefix: str = "lock:") -> None:
        self.client = client
        self.prefix = prefix

    def key(self, name: str) -> str:
        return self.prefix + name

    @contextlib.contextmanager
    def lock(
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
    ) -> Iterator[Lease]:
        """Holds the lock while the block runs; see the module docstring."""
        lease = self.acquire(
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
            if refresher is not None:
                refresher.stop()
            self.leave(lease, min_hold)

    def acquire(
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
        the whole ``wait``. ``wait_replicas=n`` also waits until n replicas have the
        grant, else releases it and raises ``NotReplicated``: a grant that only the
        primary knows is lost if it fails over, and granted again to someone else.
        ``shared=True`` takes it as a reader, ``limit=n`` one of a semaphore's n
        permits; ``WrongMode`` if the lock is held in another mode."""
        key = self.key(name)
        token = new_token() if token is None else token
        fence = _acquire.acquire(
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

    def refresh(self, lease: Lease, ttl: Optional[float] = None) -> bool:
        """Restarts the lease at ``ttl`` (default: the lease's own) from now; False if
        the token no longer holds the lock."""
        return self._refresh_ms(lease, to_ms(lease.ttl if ttl is None else ttl))

    def _refresh_ms(self, lease: Lease, ttl_ms: int) -> bool:
        args = refresh_args(lease.key, lease.token, ttl_ms)
        return parse_flag(self.client.execute_command(*args))

    def release(self, lease: Lease) -> bool:
        """Releases the lock if this lease still holds it; ``lease.released`` says."""
        reply = self.client.execute_command(*release_args(lease.key, lease.token))
        lease.released = parse_flag(reply)
        return lease.released

    def leave(self, lease: Lease, min_hold: Optional[float] = None) -> None:
        """Releases the lock, or cuts the lease to what is left of ``min_hold``."""
        hold_ms = lease.hold_left_ms(min_hold, time.monotonic())
        if hold_ms > 0:
            self._refresh_ms(lease, hold_ms)
        else:
            self.release(lease)

    def info(self, name: str) -> Optional[LockInfo]:
        """``LOCK.INFO`` of the lock ``name`` as a dict (None: free, nobody waits)."""
        return lock_info(self.client, self.key(name))
