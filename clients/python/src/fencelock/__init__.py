"""fencelock: locks with fencing tokens for redis-py, on the fencelock Redis module.

- ``fencelock.Lock``: a drop-in ``lock_class`` for ``redis.Redis.lock()``.
- ``fencelock.Semaphore``: at most ``limit`` holders; ``fencelock.ReadWriteLock``:
  readers (``.read()``) or one writer (``.write()``). Both are ``Lock``s underneath.
- ``fencelock.Locks``: a lock manager with auto-refresh, loss reporting and
  ``min_hold``, for threads, also for readers (``shared=True``) and semaphore permits
  (``limit=n``); ``fencelock.asyncio`` has all of these for asyncio.
- ``fencelock.lock_info``: ``LOCK.INFO`` as a dict.
- ``lease.guard(*command)`` / ``lock.guard(*command)``: a command that runs only while
  the lock is held (``LOCK.GUARD``); ``fencelock.fenced``: one that runs only with a
  fence at least a mark's highest (``LOCK.FENCED``).
"""

from __future__ import annotations

from redis.exceptions import LockError, LockNotOwnedError

from .errors import LockLost, LockNotAcquired, NotReplicated, StaleFence, WrongMode
from .guarded import fenced
from .info import LockInfo, lock_info
from .lease import Lease
from .lock import Lock
from .locks import Locks
from .shared import ReadWriteLock, Semaphore

__version__ = "0.1.0"

__all__ = [
    "Lease",
    "Lock",
    "LockError",
    "LockInfo",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwnedError",
    "Locks",
    "NotReplicated",
    "ReadWriteLock",
    "Semaphore",
    "StaleFence",
    "WrongMode",
    "__version__",
    "fenced",
    "lock_info",
]
