"""fencelock for asyncio: ``Lock`` (a drop-in ``lock_class`` for ``redis.asyncio``
clients), ``Semaphore`` and ``ReadWriteLock``, ``Locks`` (the lock manager with
auto-refresh), ``lock_info`` and ``fenced``; leases and locks have ``guard``."""

from __future__ import annotations

from ..errors import LockLost, LockNotAcquired, NotReplicated, StaleFence, WrongMode
from ..info import LockInfo
from .guarded import fenced
from .info import lock_info
from .lease import Lease
from .lock import Lock
from .locks import Locks
from .shared import ReadWriteLock, Semaphore

__all__ = [
    "Lease",
    "Lock",
    "LockInfo",
    "LockLost",
    "LockNotAcquired",
    "Locks",
    "NotReplicated",
    "ReadWriteLock",
    "Semaphore",
    "StaleFence",
    "WrongMode",
    "fenced",
    "lock_info",
]
