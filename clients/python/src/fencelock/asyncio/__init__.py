"""fencelock for asyncio: ``Lock`` (a drop-in ``lock_class`` for ``redis.asyncio``
clients), ``MultiLock`` (several locks at once), ``Semaphore`` and ``ReadWriteLock``,
``Locks`` (the lock manager with one refresher task, loss reports, ``once``,
``once_result``, ``idempotent``, ``lock_all``), ``Election`` (leader election),
``lock_info`` and ``fenced``; leases and locks have ``guard``. The same names as
``fencelock``, awaited."""

from __future__ import annotations

from .._async.election import Election, Leadership
from .._async.guarded import fenced
from .._async.info import lock_info
from .._async.lease import Lease
from .._async.lock import Lock
from .._async.locks import Locks
from .._async.multi import ManagedMultiLock, MultiLock
from .._async.shared import ReadWriteLock, Semaphore
from .._election import Leader
from .._once import Once
from ..errors import (
    Deadlock,
    FingerprintMismatch,
    LockLost,
    LockNotAcquired,
    ModuleNotLoaded,
    NotReplicated,
    ServerUnavailable,
    StaleFence,
    WrongMode,
    WrongSession,
)
from ..info import LockInfo

__all__ = [
    "Deadlock",
    "Election",
    "FingerprintMismatch",
    "Leader",
    "Leadership",
    "Lease",
    "Lock",
    "LockInfo",
    "LockLost",
    "LockNotAcquired",
    "Locks",
    "ManagedMultiLock",
    "ModuleNotLoaded",
    "MultiLock",
    "NotReplicated",
    "Once",
    "ReadWriteLock",
    "Semaphore",
    "ServerUnavailable",
    "StaleFence",
    "WrongMode",
    "WrongSession",
    "fenced",
    "lock_info",
]
