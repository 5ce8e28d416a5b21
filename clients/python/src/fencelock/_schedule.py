"""When each lease of a lock manager is refreshed and when it counts as lost: the pure
schedule behind the one refresher thread (or task) of a ``Locks``. No I/O and no clock
of its own: every method takes ``now`` (monotonic seconds), so the rules are tested
with plain numbers.

A refreshed lease is due every ttl/3 from the *send* time of its last confirmed
refresh (the acquire's, at first), until ``refresh_until`` (``max_hold``); a refresh
that failed with an error is tried again soon, never later than the deadline. A lease
whose deadline passes with no refresh confirmed is lost, whatever is in flight: the
client never believes it holds a lock past that."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol

# After an error (server unreachable, timeout) a refresh is tried again after this
# share of the ttl, at most RETRY_MAX seconds later.
RETRY_SHARE = 0.1
RETRY_MAX = 1.0


class Watched(Protocol):
    ttl: float
    deadline: float
    refresh_until: Optional[float]


@dataclass
class _Entry:
    refresh: bool
    next_refresh: float
    in_flight: bool = False


class Schedule:
    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, _Entry]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, lease: object) -> bool:
        return id(lease) in self._entries

    def add(self, lease: Watched, refresh: bool, sent_at: float) -> None:
        """Watches ``lease`` from now; with ``refresh``, refreshes it too."""
        entry = _Entry(refresh, sent_at + lease.ttl / 3)
        self._entries[id(lease)] = (lease, entry)
        self._stop_refreshing_if_past_hold(lease, entry)

    def remove(self, lease: object) -> None:
        self._entries.pop(id(lease), None)

    def in_flight(self, lease: object) -> bool:
        found = self._entries.get(id(lease))
        return found is not None and found[1].in_flight

    def take(self, lease: object) -> bool:
        """Marks ``lease`` in flight (refreshed with others: a session's keepalive)
        unless it is not watched or already in flight; whether it was taken."""
        found = self._entries.get(id(lease))
        if found is None or found[1].in_flight:
            return False
        found[1].in_flight = True
        return True

    def expired(self, now: float) -> list[Any]:
        """The leases whose deadline has passed unconfirmed; no longer watched."""
        gone = [lease for lease, _ in self._entries.values() if now >= lease.deadline]
        for lease in gone:
            self.remove(lease)
        return gone

    def due(self, now: float) -> list[Any]:
        """The leases to refresh now, marked in flight until ``done``."""
        batch = []
        for lease, entry in self._entries.values():
            if entry.refresh and not entry.in_flight and now >= entry.next_refresh:
                entry.in_flight = True
                batch.append(lease)
        return batch

    def done(
        self,
        lease: Watched,
        sent_at: float,
        confirmed: Optional[bool],
        ttl: Optional[float] = None,
    ) -> None:
        """The outcome of a refresh sent at ``sent_at``: confirmed (the caller has
        moved the lease's deadline; ``ttl``: the lease it got, if not its own ttl),
        refused (lost: no longer watched), or None when it failed with an error
        (tried again soon)."""
        found = self._entries.get(id(lease))
        if found is None:
            return
        entry = found[1]
        entry.in_flight = False
        if confirmed is False:
            self.remove(lease)
            return
        if confirmed:
            entry.next_refresh = sent_at + (lease.ttl if ttl is None else ttl) / 3
        else:
            retry = min(lease.ttl * RETRY_SHARE, RETRY_MAX)
            entry.next_refresh = min(sent_at + retry, lease.deadline)
        self._stop_refreshing_if_past_hold(lease, entry)

    def next_wakeup(self) -> Optional[float]:
        """When something is next due (a refresh or a deadline); None: nothing."""
        times = []
        for lease, entry in self._entries.values():
            times.append(lease.deadline)
            if entry.refresh and not entry.in_flight:
                times.append(entry.next_refresh)
        return min(times, default=None)

    def earliest_deadline(self) -> Optional[float]:
        return min(
            (lease.deadline for lease, _ in self._entries.values()), default=None
        )

    @staticmethod
    def _stop_refreshing_if_past_hold(lease: Watched, entry: _Entry) -> None:
        # max_hold: no refresh is sent after it; the lease then runs out on its own.
        if lease.refresh_until is not None and entry.next_refresh > lease.refresh_until:
            entry.refresh = False
