"""Keeps a ``fencelock.Locks`` lease alive from a daemon thread: ``LOCK.REFRESH`` every
ttl/3 until stopped, and the loss report when a refresh finds the lock gone."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from redis.exceptions import RedisError

from .lease import Lease

log = logging.getLogger("fencelock")

OnLost = Callable[[Lease], object]


class Refresher:
    def __init__(
        self, lease: Lease, refresh: Callable[[], bool], on_lost: Optional[OnLost]
    ) -> None:
        self.lease = lease
        self._refresh = refresh
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"fencelock-refresh-{lease.key!r}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops refreshing; returns once no refresh is in flight any more, so that a
        release that follows cannot be overtaken by one."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        lease = self.lease
        # A refresh that fails with an error is tried again at the next tick: the
        # lease is still ours until a whole ttl has passed since the last success.
        held_until = lease.acquired_at + lease.ttl
        while not self._stop.wait(lease.ttl / 3):
            started = time.monotonic()
            try:
                if self._refresh():
                    held_until = started + lease.ttl
                    continue
            except (RedisError, OSError) as error:
                log.warning("fencelock: refresh of %r failed: %s", lease.key, error)
                if time.monotonic() < held_until:
                    continue
            if not self._stop.is_set():
                self._report_lost()
            return

    def _report_lost(self) -> None:
        lease = self.lease
        lease.lost.set()
        log.warning("fencelock: lost the lock %r (fence %d)", lease.key, lease.fence)
        if self._on_lost is not None:
            try:
                self._on_lost(lease)
            except Exception:
                log.exception("fencelock: on_lost for %r failed", lease.key)
