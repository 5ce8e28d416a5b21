"""``LockLost`` and ``LockNotAcquired`` survive pickling (as a multiprocessing pool or
Celery sends a job's exception back). Neither side's (the errors are one set of
classes for both, no server is asked), so written once by hand. Every loss being
``LockLost`` on both sides is tests/_async/test_losses.py (the sync side generated
from it)."""

from __future__ import annotations

import pickle

import fencelock


def test_lock_lost_and_lock_not_acquired_survive_pickling() -> None:
    """As a multiprocessing pool or Celery sends a job's exception back."""
    lost = pickle.loads(pickle.dumps(fencelock.LockLost("lock:a", "deadline")))
    assert (lost.key, lost.reason) == ("lock:a", "deadline")
    assert str(lost) == str(fencelock.LockLost("lock:a", "deadline"))
    busy = pickle.loads(pickle.dumps(fencelock.LockNotAcquired("lock:b")))
    assert busy.key == "lock:b" and "held by someone else" in str(busy)
