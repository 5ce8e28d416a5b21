"""The plan of one acquire: the ``LOCK.ACQUIRE`` (or, for several keys at once,
``LOCK.ACQUIREALL``) arguments as time passes (a re-sent wait asks only for the time
left), the parsing of its grant, and how long the connection that carries a wait may
read. Pure and shared by the sync and asyncio clients."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from ._protocol import (
    PROVISIONAL_TTL_MS,
    Args,
    Key,
    Token,
    Value,
    acquire_all_args,
    acquire_args,
    block_ms,
    check_limit,
    parse_grant,
    parse_grant_all,
)


@dataclass(frozen=True)
class Plan:
    key: Key
    token: Token
    lease_ms: int
    # 0: one try; None: wait forever; else seconds in the server's queue.
    wait: Optional[float]
    # When a finite wait ends, on the monotonic clock.
    deadline: Optional[float]
    wait_replicas: int
    replicas_timeout: float
    # The mode asked for: SHARED, or LIMIT n (a semaphore; shared implied).
    shared: bool = False
    limit: Optional[int] = None
    # The session the holding joins (None: none) and its lock-delay in ms (None: the
    # server's default).
    session: Optional[Token] = None
    lock_delay_ms: Optional[int] = None
    # Every key of a ``LOCK.ACQUIREALL``, in the order given (``key`` is the first,
    # which routes it on a cluster); None: a ``LOCK.ACQUIRE`` of ``key``.
    keys: Optional[tuple[Key, ...]] = None
    # The public value of the exclusive holding (``VALUE``); None: none sent.
    value: Optional[Value] = None

    @classmethod
    def make(
        cls,
        key: Key,
        token: Token,
        ttl_ms: Optional[int],
        wait: Optional[float],
        wait_replicas: int,
        replicas_timeout: float,
        *,
        shared: bool = False,
        limit: Optional[int] = None,
        session: Optional[Token] = None,
        lock_delay_ms: Optional[int] = None,
        keys: Optional[tuple[Key, ...]] = None,
        value: Optional[Value] = None,
    ) -> Plan:
        limit = check_limit(limit)
        if ttl_ms is None and (shared or limit is not None):
            # Each shared holder's lease ends on its own on the server; PERSIST,
            # which makes an exclusive lock permanent, cannot keep one.
            raise ValueError("a shared holder (reader, semaphore permit) needs a ttl")
        deadline = None if wait is None else time.monotonic() + max(wait, 0)
        lease_ms = PROVISIONAL_TTL_MS if ttl_ms is None else ttl_ms
        return cls(
            key,
            token,
            lease_ms,
            wait,
            deadline,
            wait_replicas,
            replicas_timeout,
            shared=shared or limit is not None,
            limit=limit,
            session=session,
            lock_delay_ms=lock_delay_ms,
            keys=keys,
            value=value,
        )

    @property
    def blocks(self) -> bool:
        return block_ms(self.wait) is not None

    def args(self, now: Optional[float] = None, *, block: bool = True) -> Args:
        """The acquire to send at ``now``: a retry waits only for what is left.
        ``block=False`` sends one try, whatever the wait (a wait that polls)."""
        wait = self.wait
        if self.deadline is not None and now is not None:
            wait = self.deadline - now
        if self.keys is not None:
            return acquire_all_args(
                self.keys,
                self.lease_ms,
                self.token,
                block_ms(wait) if block else None,
                shared=self.shared,
                limit=self.limit,
                session=self.session,
                lock_delay_ms=self.lock_delay_ms,
            )
        return acquire_args(
            self.key,
            self.lease_ms,
            self.token,
            block_ms(wait) if block else None,
            shared=self.shared,
            limit=self.limit,
            session=self.session,
            lock_delay_ms=self.lock_delay_ms,
            value=self.value,
        )

    def parse(self, reply: Any) -> Optional[list[int]]:
        """The fences of a grant, one per key in the order of the keys; None: not
        granted."""
        if self.keys is not None:
            return parse_grant_all(reply)
        fence = parse_grant(reply)
        return None if fence is None else [fence]

    def left(self, now: float) -> Optional[float]:
        """Seconds of the wait left at ``now`` (None: without limit)."""
        return None if self.deadline is None else self.deadline - now

    def read_timeout(
        self, socket_timeout: Optional[float], block: bool = True
    ) -> Optional[float]:
        """How long the connection that carries the acquire may wait for its reply:
        the wait, then as long as the client would wait for any reply (and for
        ``WAIT``); None, without limit, for a wait without limit or a client without
        a socket timeout. A try (``block=False``) answers at once: the socket
        timeout (and ``WAIT``'s) alone."""
        if socket_timeout is None:
            return None
        extra = self.replicas_timeout if self.wait_replicas else 0.0
        if not block:
            return socket_timeout + extra
        if self.wait is None:
            return None
        return max(self.wait, 0.0) + socket_timeout + extra
