"""The lease ``fencelock.asyncio.Locks`` hands out: ``fencelock.lease.LeaseBase`` with
an ``asyncio.Event`` that is set when the lock is found lost, and ``guard`` on the
asyncio client that granted it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ..errors import LockLost
from ..lease import LeaseBase
from . import guarded

if TYPE_CHECKING:
    from .._types import AsyncClient


@dataclass
class Lease(LeaseBase):
    """A lock held through ``fencelock.asyncio.Locks``: ``key``, ``token``, ``fence``,
    ``ttl``; ``lost`` is set when a refresh finds that the lease ended while the block
    still ran (await ``lease.lost.wait()`` to be told), or when ``guard`` does."""

    lost: asyncio.Event = field(default_factory=asyncio.Event)
    # The client of the ``Locks`` that granted it, for ``guard``.
    client: Optional[AsyncClient] = field(default=None, repr=False, compare=False)

    async def guard(self, *command: Any) -> Any:
        """Runs ``command`` only if this lease holds the lock now (``LOCK.GUARD``);
        returns its reply. If it does not, nothing ran: sets ``lost`` (unless the
        lease was released) and raises ``LockLost``."""
        if self.client is None:
            raise self.no_client()
        try:
            return await guarded.guard(self.client, self.key, self.token, *command)
        except LockLost:
            if not self.released:
                self.lost.set()
            raise

    def ensure_held(self) -> None:
        """Raises ``LockLost`` if a refresh found the lock gone; call it before an
        irreversible step."""
        if self.lost.is_set():
            raise LockLost(self.key)
