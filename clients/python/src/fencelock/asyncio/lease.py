"""The lease ``fencelock.asyncio.Locks`` hands out: ``fencelock.lease.LeaseBase`` with
an ``asyncio.Event`` that is set when the lock is found lost."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..errors import LockLost
from ..lease import LeaseBase


@dataclass
class Lease(LeaseBase):
    """A lock held through ``fencelock.asyncio.Locks``: ``key``, ``token``, ``fence``,
    ``ttl``; ``lost`` is set when a refresh finds that the lease ended while the block
    still ran (await ``lease.lost.wait()`` to be told)."""

    lost: asyncio.Event = field(default_factory=asyncio.Event)

    def ensure_held(self) -> None:
        """Raises ``LockLost`` if a refresh found the lock gone; call it before an
        irreversible step."""
        if self.lost.is_set():
            raise LockLost(self.key)
