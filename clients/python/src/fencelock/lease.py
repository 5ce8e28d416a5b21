"""A held lock as the lock managers hand it out: key, token, fence, lease length, and
whether it was lost. ``LeaseBase`` is what the sync and asyncio leases share; they
differ only in the kind of event that signals loss."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Optional

from ._protocol import Key, Token
from .errors import LockLost


@dataclass
class LeaseBase:
    key: Key
    token: Token
    fence: int
    # The lease in seconds that each refresh restores.
    ttl: float
    # When the grant's reply arrived, on the monotonic clock: a ``min_hold`` counts
    # from here, which is never before the server granted it.
    acquired_at: float
    # Set on leaving: True if this holder still had the lock and released it.
    released: bool = False

    def hold_left_ms(self, min_hold: Optional[float], now: float) -> int:
        """What is left of ``min_hold`` at ``now`` in whole ms (rounded up, so the lock
        is never given up early); 0 when nothing is."""
        if not min_hold:
            return 0
        return max(0, math.ceil((self.acquired_at + min_hold - now) * 1000))


@dataclass
class Lease(LeaseBase):
    """A lock held through ``fencelock.Locks``. ``lost`` is set when a refresh finds
    that the lease ended (expired, deleted, taken over) while the block still ran."""

    lost: threading.Event = field(default_factory=threading.Event)

    def ensure_held(self) -> None:
        """Raises ``LockLost`` if a refresh found the lock gone; call it before an
        irreversible step."""
        if self.lost.is_set():
            raise LockLost(self.key)
