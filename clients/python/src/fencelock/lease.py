"""A held lock as the lock managers hand it out: key, token, fence, lease length, mode
(exclusive, shared, semaphore), whether it was lost, and ``guard`` for commands that
must only run while it is held. ``LeaseBase`` is what the sync and asyncio leases
share; they differ in the kind of event that signals loss and of client that
``guard`` uses."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from redis.exceptions import LockError

from . import guarded
from ._protocol import Key, Mode, Token, mode_of
from .errors import LockLost, lock_error

if TYPE_CHECKING:
    from ._types import SyncClient


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
    # A shared holder (a reader, or a permit of a semaphore of ``limit``).
    shared: bool = False
    limit: Optional[int] = None

    @property
    def mode(self) -> Mode:
        """``"exclusive"``, ``"shared"`` or ``"semaphore"``, as ``LOCK.INFO`` says."""
        return mode_of(self.shared, self.limit)

    def hold_left_ms(self, min_hold: Optional[float], now: float) -> int:
        """What is left of ``min_hold`` at ``now`` in whole ms (rounded up, so the lock
        is never given up early); 0 when nothing is."""
        if not min_hold:
            return 0
        return max(0, math.ceil((self.acquired_at + min_hold - now) * 1000))

    def no_client(self) -> LockError:
        """The error of ``guard`` on a lease made by hand, without a client."""
        return lock_error(
            LockError, "this lease has no client: take it through Locks", self.key
        )


@dataclass
class Lease(LeaseBase):
    """A lock held through ``fencelock.Locks``. ``lost`` is set when a refresh finds
    that the lease ended (expired, deleted, taken over) while the block still ran, or
    when ``guard`` does."""

    lost: threading.Event = field(default_factory=threading.Event)
    # The client of the ``Locks`` that granted it, for ``guard``.
    client: Optional[SyncClient] = field(default=None, repr=False, compare=False)

    def guard(self, *command: Any) -> Any:
        """Runs ``command`` (``"SET", "{sku}:stock", 7``) only if this lease holds the
        lock now, checked and run in one step on the server (``LOCK.GUARD``); returns
        the command's reply. If it does not, nothing ran: sets ``lost`` (unless the
        lease was released) and raises ``LockLost``."""
        if self.client is None:
            raise self.no_client()
        try:
            return guarded.guard(self.client, self.key, self.token, *command)
        except LockLost:
            if not self.released:
                self.lost.set()
            raise

    def ensure_held(self) -> None:
        """Raises ``LockLost`` if a refresh found the lock gone; call it before an
        irreversible step."""
        if self.lost.is_set():
            raise LockLost(self.key)
