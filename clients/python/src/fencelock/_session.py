"""The sessions of one lock manager: the bookkeeping behind ``Locks(client,
session=True)``, shared by the sync and asyncio sides (pure: no I/O, no clock).

A session is a name, as secret as a token, that the manager sends with its acquires
(``LOCK.ACQUIRE … SESSION name``); each server groups the holdings acquired with it,
so that one ``LOCK.KEEPALIVE name ttl`` per server keeps them all alive and one
``LOCK.CLOSE name`` releases them all. A keepalive gives every holding of its session
on that server the same lease, so the manager keeps one session per lease length: by
default one per distinct ``ttl`` of its locks (each lock keeps its own ttl, first grant
and every keepalive; most managers use one ttl, so one session), or one for all with
``session_ttl`` (the first grant is still the lock's ttl; each keepalive gives it
``session_ttl``). A name serves every server of the manager: a holding that a cluster
moves to another node keeps its session there, and the next keepalive sent to the node
that owns its key finds it. A fresh name replaces one when the manager is closed, and
when the session is found lost on a server (a keepalive answered 0, or its deadline
passed), so that nothing it gave up on there can be kept alive again.

What is kept here: the name new acquires use; the leases each name holds (the ones
the manager believes held; the server says which node each is on by its key, at the
moment of asking); where each name has sent acquires (``LOCK.CLOSE`` goes there too,
for the acquires still waiting); releases that failed, to send again before the next
keepalive of their session (else that keepalive would keep the holding alive); which
servers have the session commands. A session is one process's: a forked child starts
with none (``forget_inherited``)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from ._protocol import Key, Token, new_session_name, to_ms

NodeOf = Callable[[Key], Any]


class Sessions:
    def __init__(self, ttl: Optional[float] = None) -> None:
        if ttl is not None and to_ms(ttl) < 1:
            raise ValueError(f"session_ttl must be at least 1 ms, not {ttl!r}")
        # One lease for every keepalive, in seconds; None: each lock's own ttl.
        self.ttl = ttl
        # The name new acquires use, per keepalive ttl (ms); the ttl of each name.
        self._current: dict[int, str] = {}
        self._ttl_ms: dict[str, int] = {}
        self._lock = threading.RLock()
        self._members: dict[str, dict[int, Any]] = {}
        # Per name, the servers it sent acquires to (a cluster node's name, None for a
        # plain client), each with a key there: one per server, however many keys.
        self._used: dict[str, dict[Any, Key]] = {}
        self._in_flight: dict[str, int] = {}
        self._pending: dict[str, list[tuple[Key, Token]]] = {}
        # Closed names with acquires still in flight: a grant of one is not ours.
        self._closed: set[str] = set()

    def begin(self, key: Key, ttl_ms: int, node: Any) -> str:
        """The name an acquire of ``key`` (on server ``node``) for ``ttl_ms`` sends
        now; ``end`` it once answered."""
        with self._lock:
            kept_ms = ttl_ms if self.ttl is None else to_ms(self.ttl)
            name = self._current.get(kept_ms)
            if name is None:
                name = self._current[kept_ms] = new_session_name()
                self._ttl_ms[name] = kept_ms
            self._used.setdefault(name, {}).setdefault(node, key)
            self._in_flight[name] = self._in_flight.get(name, 0) + 1
            return name

    def end(self, name: str) -> None:
        with self._lock:
            self._in_flight[name] = self._in_flight.get(name, 1) - 1
            if name in self._closed and self._in_flight[name] <= 0:
                self._closed.discard(name)
                self._in_flight.pop(name, None)
                return
            self._tidy(name)

    def forget_inherited(self) -> None:
        """In the child of a fork: the names and holdings so far are the parent's
        (the parent keeps them alive and closes them); the child's acquires take new
        names of its own, so that its ``close()`` never touches the parent's or a
        sibling's holdings. A new lock, too: the parent's may have been held by a
        thread that does not exist here."""
        self.__init__(self.ttl)  # type: ignore[misc]

    def keepalive_ms(self, name: str) -> int:
        """The lease each keepalive of ``name`` gives its holdings, in ms."""
        with self._lock:
            return self._ttl_ms.get(name, 1)

    def join(self, lease: Any) -> bool:
        """Counts ``lease`` as one of its session's; False (and not counted) if that
        session was closed since its acquire was sent."""
        with self._lock:
            if lease.session in self._closed:
                return False
            self._members.setdefault(lease.session, {})[id(lease)] = lease
            return True

    def leave(self, lease: Any) -> bool:
        """Forgets ``lease``; whether it was one of the session's."""
        with self._lock:
            members = self._members.get(lease.session)
            found = members is not None and members.pop(id(lease), None) is not None
            self._tidy(lease.session)
            return found

    def holds(self, lease: Any) -> bool:
        with self._lock:
            return id(lease) in self._members.get(lease.session, {})

    def members(self, name: str, node: Any, node_of: NodeOf) -> list[Any]:
        """The leases of ``name`` whose keys are on ``node`` now, oldest first."""
        with self._lock:
            leases = list(self._members.get(name, {}).values())
        return [lease for lease in leases if node_of(lease.key) == node]

    def count(self) -> int:
        with self._lock:
            return sum(len(members) for members in self._members.values())

    def lost_on(self, name: str) -> None:
        """The session ``name`` was found lost on a server: new acquires take a new
        name, so that whatever the server may still hold of the old one is never
        kept alive again there."""
        with self._lock:
            kept_ms = self._ttl_ms.get(name)
            if kept_ms is not None and self._current.get(kept_ms) == name:
                del self._current[kept_ms]
                self._tidy(name)

    def release_later(self, lease: Any) -> None:
        """A release of ``lease`` failed: sent again before its session's next
        keepalive to its server."""
        with self._lock:
            self._pending.setdefault(lease.session, []).append((lease.key, lease.token))

    def take_pending(
        self, name: str, node: Any, node_of: NodeOf
    ) -> list[tuple[Key, Token]]:
        with self._lock:
            pending = self._pending.get(name, [])
            taken = [one for one in pending if node_of(one[0]) == node]
            if taken:
                self._pending[name] = [one for one in pending if one not in taken]
            return taken

    def give_back(self, name: str, pending: list[tuple[Key, Token]]) -> None:
        """Releases taken but not known to have been sent."""
        if pending:
            with self._lock:
                self._pending.setdefault(name, []).extend(pending)

    def close(self) -> list[tuple[str, list[Key], list[Any]]]:
        """Ends every session: for each name, the keys whose servers must be told
        (``LOCK.CLOSE``) and the leases it held; new acquires take a new name, and a
        grant that arrives later for a closed name is not the manager's."""
        with self._lock:
            names = [*self._used, *self._members, *self._pending]
            closing = []
            for name in dict.fromkeys(names):
                leases = list(self._members.pop(name, {}).values())
                keys = list(self._used.pop(name, {}).values())
                keys += [lease.key for lease in leases]
                keys += [key for key, _ in self._pending.pop(name, [])]
                closing.append((name, keys, leases))
            self._in_flight = {n: c for n, c in self._in_flight.items() if c > 0}
            self._closed.update(self._in_flight)
            self._current.clear()
            self._ttl_ms.clear()
            return closing

    def _tidy(self, name: Optional[str]) -> None:
        # An old name with nothing held and nothing in flight has nothing to close.
        if name is None or name in self._current.values():
            return
        if self._members.get(name) or self._in_flight.get(name):
            return
        self._members.pop(name, None)
        self._in_flight.pop(name, None)
        self._used.pop(name, None)
        self._pending.pop(name, None)
        self._ttl_ms.pop(name, None)
