# Generated from tests/_async/test_block_entry.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""A failure after the grant, while a ``lock`` block is being entered (its watch could
not start: the refresher failed, say), leaves nothing behind: the lock is released and
its session does not keep it alive, with a session and without."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import fencelock
from fencelock._sync import _refresher


class WatchFailed(Exception):
    pass


def failing_add(self: Any, lease: Any, refresh: bool) -> None:
    raise WatchFailed("the watch could not start")


@pytest.mark.parametrize("session", [True, False], ids=["session", "own-lease"])
def test_a_block_that_cannot_start_leaves_its_lock_free(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, session: bool
) -> None:
    locks = fencelock.Locks(r)
    with monkeypatch.context() as patched:
        patched.setattr(_refresher.Refresher, "add", failing_add)
        # A lease far longer than the test (a busy machine's stall past a third of
        # a short one turns the grant into a refresh, and the lease may be gone by
        # then): only a release can have freed the lock when it is looked at.
        with pytest.raises(WatchFailed):
            with locks.lock("entry", ttl=30, session=session):
                pytest.fail("the block ran")
    assert locks.info("entry") is None
    # Not kept alive either: another manager takes it at once.
    with fencelock.Locks(r).lock("entry", ttl=1):
        pass
    locks.close()
