"""What the package's objects do in the child of an ``os.fork()`` (gunicorn
``--preload``, Celery prefork, ``multiprocessing`` with fork): shared by the sync and
asyncio sides.

A forked child starts with a copy of the parent's memory but only the thread that
forked: a lock manager's refresher thread, the locks its threads held, the sockets of
its own connections and the leases it keeps alive are the parent's. Every object that
keeps such state registers here (weakly: it can still be collected) and is told after
each fork, in the child, to start clean (``_after_fork``): the leases the parent held
stay the parent's, refreshed by the parent only; the child neither refreshes, releases
nor closes them. redis-py resets its own pools by process id the same way."""

from __future__ import annotations

import logging
import os
import weakref
from typing import Any

log = logging.getLogger("fencelock")

_objects: weakref.WeakSet[Any] = weakref.WeakSet()


def track(obj: Any) -> None:
    """``obj._after_fork()`` runs in the child of every later fork."""
    _objects.add(obj)


def _in_child() -> None:
    for obj in list(_objects):
        try:
            obj._after_fork()
        except Exception:  # one object's failure must not leave the others inherited
            log.exception("fencelock: resetting %r after fork failed", obj)


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_in_child)
