"""fencelock: locks with fencing tokens for redis-py, on the fencelock Redis module.

- ``fencelock.Lock``: a drop-in ``lock_class`` for ``redis.Redis.lock()``.
- ``fencelock.Semaphore``: at most ``limit`` holders; ``fencelock.ReadWriteLock``:
  readers (``.read()``) or one writer (``.write()``). Both are ``Lock``s underneath.
- ``fencelock.Locks``: a lock manager with one refresher thread for all its leases,
  leases that know their deadline, loss reports, ``min_hold``/``max_hold`` and the
  run-once decorator ``once``, also for readers (``shared=True``) and semaphore
  permits (``limit=n``); its locks are kept in a session (one ``LOCK.KEEPALIVE`` per
  server, ``close()`` releases them all) where the server has sessions, with an
  optional ``lock_delay``; ``fencelock.asyncio`` has all of these for asyncio.
- ``fencelock.MultiLock``: several locks taken together, all or none
  (``LOCK.ACQUIREALL``), shaped like ``Lock``; ``Locks.lock_all`` does the same with
  the manager's leases (``ManagedMultiLock``). ``fencelock.Deadlock`` is raised when
  the server refuses a wait that would close a cycle.
- ``Locks.once_result`` / ``@Locks.idempotent``: run an operation once and answer
  every duplicate with its stored result (``LOCK.ONCE``, ``LOCK.DONE``); ``Once`` is
  what the block gets, ``FingerprintMismatch`` a claim with another fingerprint.
- ``fencelock.Election``: leader election on one lock, shaped like etcd's:
  ``campaign(value)`` waits and leads (a ``Leadership`` with its fence,
  ``proclaim``, ``resign``), ``leader()`` and ``observe()`` say who leads.
- ``fencelock.lock_info``: ``LOCK.INFO`` as a dict.
- ``lease.guard(*command)`` / ``lock.guard(*command)``: a command that runs only while
  the lock is held (``LOCK.GUARD``); ``fencelock.fenced``: one that runs only with a
  fence at least a mark's highest (``LOCK.FENCED``).
- ``fencelock.sql.claim``: the fence check of a database outside Redis, made before
  the read in the same transaction as the write.
"""

from __future__ import annotations

from redis.exceptions import LockError, LockNotOwnedError

from . import sql
from ._election import Leader
from ._once import Once
from ._sync.election import Election, Leadership
from ._sync.guarded import fenced
from ._sync.info import lock_info
from ._sync.lease import Lease
from ._sync.lock import Lock
from ._sync.locks import Locks
from ._sync.multi import ManagedMultiLock, MultiLock
from ._sync.shared import ReadWriteLock, Semaphore
from ._version import __version__
from .errors import (
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
from .info import LockInfo

__all__ = [
    "Deadlock",
    "Election",
    "FingerprintMismatch",
    "Leader",
    "Leadership",
    "Lease",
    "Lock",
    "LockError",
    "LockInfo",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwnedError",
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
    "__version__",
    "fenced",
    "lock_info",
    "sql",
]
