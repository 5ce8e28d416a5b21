"""What an election reads, shared by ``fencelock.Election`` and
``fencelock.asyncio.Election`` (pure: no I/O): a leader as ``LOCK.OBSERVE`` tells it,
and how long ``observe`` waits per request and between reconnects."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Union

from redis.exceptions import MasterDownError, ResponseError

# One ``LOCK.OBSERVE … BLOCK`` of ``observe`` waits at most this long (seconds): short,
# so that a connection that went silent (a stopped server, a partition) is found within
# this plus the socket timeout, and a failover's new master is asked soon.
OBSERVE_BLOCK = 2.0
# How often ``observe`` asks while the client's bounded pool has no connection to
# spare for a wait (it then asks without ``BLOCK``, as an acquire tries).
OBSERVE_POLL = 0.1
# The pause before ``observe`` asks again after a lost connection: doubled per failure
# in a row, from the first to the last.
RECONNECT_FIRST = 0.05
RECONNECT_MOST = 2.0


class Leader(NamedTuple):
    """The leader of an election: the value it campaigned with (or proclaimed last)
    and the fence of its leadership. ``str`` when the client decodes responses
    (``decode_responses=True``), else ``bytes``."""

    value: Union[str, bytes]
    fence: int


def leader_of(observed: tuple[int, Any]) -> Optional[Leader]:
    """The leader a ``LOCK.OBSERVE`` answer names: None when nobody holds the lock
    exclusively (free, expired, quarantined by a lock-delay, or held shared, which an
    election never does: its fence then comes with no value)."""
    fence, value = observed
    if value is None or fence == 0:
        return None
    return Leader(value, fence)


def passing(error: ResponseError) -> bool:
    """Whether an error reply to ``LOCK.OBSERVE`` says the server is changing state,
    not that the request is wrong, so that ``observe`` asks again as after a lost
    connection: a wait cut short as a master turns replica (``UNBLOCKED``), a replica
    whose master link is down while it serves no stale data (``MASTERDOWN``; redis-py
    drops the code from the message)."""
    return isinstance(error, MasterDownError) or str(error).startswith("UNBLOCKED")


def reconnect_pause(failures: int) -> float:
    """The pause after ``failures`` lost connections in a row (at least one)."""
    return float(min(RECONNECT_MOST, RECONNECT_FIRST * 2 ** min(failures - 1, 16)))
