"""fencelock: locks with fencing tokens for redis-py, on the fencelock Redis module.

- ``fencelock.Lock``: a drop-in ``lock_class`` for ``redis.Redis.lock()``.
- ``fencelock.Locks``: a lock manager with auto-refresh, loss reporting and
  ``min_hold``, for threads (``fencelock.asyncio`` has both for asyncio).
- ``fencelock.lock_info``: ``LOCK.INFO`` as a dict.
"""

from __future__ import annotations

from redis.exceptions import LockError, LockNotOwnedError

from .errors import LockLost, LockNotAcquired, NotReplicated
from .info import LockInfo, lock_info
from .lease import Lease
from .lock import Lock
from .locks import Locks

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
    "__version__",
    "lock_info",
]
