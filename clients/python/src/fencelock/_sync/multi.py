# Generated from fencelock/_async/multi.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""``fencelock.MultiLock`` / ``fencelock.MultiLock``: several locks taken in
one step, all of them or none (``LOCK.ACQUIREALL``), in the shape of redis-py's lock;
and ``ManagedMultiLock``, what ``Locks.lock_all`` returns.

    both = fencelock.MultiLock(r, ["order:17", "customer:4"], timeout=30)
    with both:
        charge(fences=both.fences)  # one fence per key, in the order of the keys

One token holds every key; each key is an ordinary holding of its own (its own fence
and lease), so ``release`` sends ``LOCK.RELEASE`` for each key and ``extend`` a
``LOCK.REFRESH`` for each. A wait is one place in every key's FIFO queue at once: the
grant comes when all the keys are free for it, and it never holds some of them while
it waits for the rest, so it cannot deadlock with another all-at-once acquire. On a
cluster the keys must share a slot (hash-tag them: ``{order:17}:row``,
``{order:17}:customer``); the first key routes the command.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Optional, Protocol

from redis.exceptions import (
    AskError,
    ConnectionError,
    LockError,
    LockNotOwnedError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from .. import _lockstate as state
from .. import _telemetry as telemetry
from .._protocol import (
    Args,
    Key,
    Mode,
    Token,
    check_keys,
    fence_args,
    is_wrongtype,
    mode_of,
    new_token,
    parse_flag,
    refresh_args,
    release_args,
    to_ms,
)
from .._servers import describe
from .._session import Sessions
from ..errors import LockLost, LockNotAcquired, ServerUnavailable, lock_error
from ._acquire import POLL, GrantAll, acquire_all
from ._commands import module_missing, reaching, release_all_quietly
from ._compat import (
    Checked,
    cancellations,
    checked,
    current_owner,
    raise_if_cancel_swallowed,
    shielded,
)
from ._compat import sleep as sleep_for
from ._connection import batch, exchange, pipelined, raise_redirect
from ._refresher import Refresher
from .lease import Lease, OnLost
from .surface import Flag, Number, RedisPyLock, Seconds

if TYPE_CHECKING:
    from .._types import SyncClient

logger = logging.getLogger(__name__)


class Manager(Protocol):
    """What the multi-key protocol below uses of its lock manager (``Locks``, in
    ``locks.py``, which builds ``ManagedMultiLock``): named here so that this file
    does not import the manager's."""

    client: SyncClient
    _refresher: Refresher
    _held: dict[Key, list[tuple[object, Lease]]]

    def key(self, name: str) -> str: ...

    def _in_this_process(self) -> None: ...

    def _refuse_waiting_for_itself(self, key: Key, mode: Mode) -> None: ...

    def _begin_in_session(
        self, key: Key, ttl: float, session: bool, lock_delay: Optional[float]
    ) -> tuple[Optional[int], Optional[Sessions], Optional[str]]: ...

    def _forget(self, lease: Lease) -> None: ...

    def _release_later(self, lease: Lease) -> None: ...

    def refresh(self, lease: Lease, ttl: Optional[float] = None) -> bool: ...


class MultiLock(RedisPyLock):
    """Distributed locks on several keys, taken and held together: ``acquire`` gets
    every one of ``names`` or none of them (``LOCK.ACQUIREALL``).

    Arguments and methods as ``fencelock.Lock`` (redis-py's lock), with a list of
    names in the place of one name: ``timeout`` is the lease of every key in seconds
    (None: without expiry), ``blocking``/``blocking_timeout`` bound the wait, and a
    wait is one place in every key's FIFO queue at once. ``fences`` are the grant's
    fences in the order of ``names``; ``release`` releases each key
    (``LOCK.RELEASE``), ``extend``/``reacquire`` refresh each (``LOCK.REFRESH``);
    ``owned()`` is True while the token holds every key, ``locked()`` while anyone
    holds any of them. ``shared=True`` takes each key as a reader. ``sleep`` is how
    often a wait tries while a key holds another type, or while the client's bounded
    pool has no connection to spare, as for ``fencelock.Lock``.

    A wait that would close a cycle with another owner's raises ``Deadlock``; keys in
    different slots of a cluster raise redis-py's ``ClusterCrossSlotError``; nothing
    is taken then. Tokens are kept per thread (``thread_local=True``), as redis-py's
    lock; on asyncio ``per_task=True`` keeps them per task (shared locks always)."""

    _logger = logger

    def __init__(
        self,
        redis: SyncClient,
        names: Sequence[Key],
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        shared: bool = False,
        per_task: bool = False,
    ) -> None:
        self.names: tuple[Key, ...] = check_keys(names)
        self.shared = shared
        super().__init__(
            redis,
            self.names,
            timeout,
            sleep,
            blocking,
            blocking_timeout,
            thread_local,
            raise_on_release_error,
            per_task=shared or per_task,
        )
        if shared:
            state.check_shared_timeout(timeout)

    def _clear_grant(self, local: Any) -> None:
        local.fences = []

    def __repr__(self) -> str:
        kind = type(self)
        return f"<{kind.__module__}.{kind.__qualname__} {list(self.names)!r}>"

    @property
    def mode(self) -> Mode:
        """``"exclusive"`` or ``"shared"`` (a reader of each key)."""
        return mode_of(self.shared, None)

    @property
    def fences(self) -> list[int]:
        """The fences of this thread's (task's) last grant, one per key in the order
        of ``names`` (empty before the first): hand each resource the fence of its
        lock."""
        return list(getattr(self.local, "fences", None) or [])

    def acquire(
        self,
        blocking: Flag = None,
        blocking_timeout: Seconds = None,
        token: Optional[Token] = None,
    ) -> bool:
        """Takes every lock; True once all are held, False (none held) if the wait
        ended first. ``blocking=False`` tries once; ``blocking_timeout`` bounds the
        wait in seconds (None: forever; 0: one try). ``token`` picks the token (str
        or bytes), else 128 random bits are used."""
        blocking = self.blocking if blocking is None else blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        encoded = state.encode_token(self.redis, token)
        deadline = state.deadline(blocking, blocking_timeout, time.monotonic())
        with telemetry.acquiring(
            self.redis,
            self.names,
            "LOCK.ACQUIREALL",
            self.mode,
            state.wait_asked(blocking, blocking_timeout),
        ) as attempt:
            grant = self._take(blocking, deadline, encoded)
            if grant is None:
                return False
            attempt.granted(grant.fences)
        self.local.token = encoded
        self.local.fences = grant.fences
        self.local.owner = current_owner()
        self.local.holding = telemetry.holding(
            self.redis, self.names, grant.fences, self.mode, grant.answered
        )
        return True

    def _take(
        self, blocking: bool, deadline: Optional[float], encoded: bytes
    ) -> Optional[GrantAll]:
        while True:
            wait = state.wait_left(blocking, deadline, time.monotonic())
            try:
                return acquire_all(
                    self.redis,
                    self.names,
                    encoded,
                    ttl_ms=state.ttl_ms(self.timeout),
                    wait=wait,
                    shared=self.shared,
                    poll=self.sleep,
                )
            except ResponseError as error:
                if not is_wrongtype(error):
                    raise
                # Another type at a key: busy, polled (the server cannot queue us).
                if not state.may_poll(blocking, deadline, self.sleep, time.monotonic()):
                    return None
                sleep_for(self.sleep)

    def locked(self) -> bool:
        """True if anyone holds any of the locks (any value at a key)."""
        return bool(
            reaching(self.redis, self.names[0], lambda: self.redis.exists(*self.names))
        )

    def owned(self) -> bool:
        """True if this lock's token (this thread's, by default) holds every key."""
        token = self._token()
        if token is None:
            return False
        replies = self._batch([fence_args(key, token) for key in self.names])
        return all(
            not isinstance(reply, ResponseError) and reply is not None
            for reply, _ in replies
        )

    def release(self) -> None:
        """Releases every lock (``LOCK.RELEASE`` of each key, in one round trip);
        ``LockLost`` (a ``LockNotOwnedError``) if the token no longer held one of
        them (the others
        are released all the same). The token is kept until the server answered, so
        a release cut short can be retried."""
        token = self._token()
        if token is None:
            raise lock_error(
                LockError,
                "Cannot release a lock that's not owned or is already unlocked.",
                self.names,
            )
        try:
            self.do_release(token)
        except LockNotOwnedError:
            self.local.token = None
            self._end_holding(LockLost.NOT_HELD)
            raise
        self.local.token = None
        self._end_holding(None)

    def _end_holding(self, lost: Optional[str]) -> None:
        """The end of this thread's (task's) holding, for its telemetry."""
        getattr(self.local, "holding", telemetry.NOTHING).end(lost=lost)

    def do_release(self, expected_token: Token) -> None:
        missing = self._owner_commands(
            [release_args(key, expected_token) for key in self.names], released=True
        )
        if missing:
            # A loss, as everywhere in the package (``LockLost`` is the
            # ``LockNotOwnedError`` redis-py raises here); the others were released.
            raise LockLost.in_words_of_redis_py(
                missing[0],
                "Cannot release a lock that's no longer owned: not held at "
                + ", ".join(repr(key) for key in missing),
                self.names,
            )

    def extend(
        self, additional_time: Number, replace_ttl: bool = False
    ) -> Literal[True]:
        """Adds ``additional_time`` seconds to each key's lease left, or with
        ``replace_ttl=True`` makes each lease that long from now
        (``LOCK.REFRESH`` of each key). ``LockNotOwnedError`` if one of them is no
        longer held (the others are extended)."""
        token = self._token()
        if token is None:
            raise lock_error(LockError, "Cannot extend an unlocked lock", self.names)
        if self.timeout is None:
            raise lock_error(
                LockError, "Cannot extend a lock with no timeout", self.names
            )
        ms = to_ms(additional_time)
        commands = [
            refresh_args(key, token, ms, add=not replace_ttl) for key in self.names
        ]
        if self._owner_commands(commands):
            raise lock_error(
                LockNotOwnedError,
                "Cannot extend a lock that's no longer owned",
                self.names,
            )
        return True

    def reacquire(self) -> Literal[True]:
        """Restarts each key's lease at ``timeout`` from now."""
        token = self._token()
        if token is None:
            raise lock_error(LockError, "Cannot reacquire an unlocked lock", self.names)
        if self.timeout is None:
            raise lock_error(
                LockError, "Cannot reacquire a lock with no timeout", self.names
            )
        ms = to_ms(self.timeout)
        if self._owner_commands([refresh_args(key, token, ms) for key in self.names]):
            raise lock_error(
                LockNotOwnedError,
                "Cannot reacquire a lock that's no longer owned",
                self.names,
            )
        return True

    def _batch(self, commands: list[Args]) -> list[tuple[Any, bool]]:
        """The replies of ``commands`` (one per key, in the order of the keys), sent
        together to the first key's server, each with whether it may have been sent
        twice; an "unknown command" raises ``ModuleNotLoaded``."""
        replies, repeated = reaching(
            self.redis,
            self.names[0],
            lambda: batch(self.redis, self.names[0], commands),
        )
        for command, reply in zip(commands, replies):
            if isinstance(reply, ResponseError):
                missing = module_missing(self.redis, self.names[0], command, reply)
                if missing is not None:
                    raise missing
        return [(reply, repeated) for reply in replies]

    def _owner_commands(
        self, commands: list[Args], released: bool = False
    ) -> list[Key]:
        """Owner-checked commands (refresh, release), one per key: the keys the
        token did not hold (another type at a key counts as not held). A release
        sent again after a lost connection finds what the first one released:
        counted as released (``released``)."""
        missing = []
        for key, (reply, repeated) in zip(self.names, self._batch(commands)):
            if isinstance(reply, ResponseError):
                if not is_wrongtype(reply):
                    raise reply
                held = False
            else:
                held = parse_flag(reply) or (released and repeated)
            if not held:
                missing.append(key)
        return missing


# The multi-key protocol of a manager's ``lock_all``: take every key as the manager's
# leases, keep them in its session or refresher, and leave them together.


def acquire_leases(
    locks: Manager,
    keys: Sequence[Key],
    ttl: float,
    *,
    wait: Optional[float],
    shared: bool,
    token: Optional[Token],
    session: bool,
    lock_delay: Optional[float],
    on_lost: Optional[OnLost],
) -> Optional[list[Lease]]:
    """``Locks.lock_all``'s acquire, for the manager ``locks``: one lease per key,
    all granted together, held by this thread (task) and watched (refreshed, or in
    the session) from now on;
    None when the wait ended first. As ``acquire`` otherwise, with a long wait's
    grant confirmed by a refresh of every key before the session counts them;
    any failure after the grant releases every key."""
    locks._in_this_process()
    keys = tuple(keys)
    first = keys[0]
    token = new_token() if token is None else token
    pending = cancellations()
    if wait != 0:  # one try answers busy, as ever; only a wait could be endless
        for key in keys:
            locks._refuse_waiting_for_itself(key, mode_of(shared, None))
    delay_ms, sessions, in_session = locks._begin_in_session(
        first, ttl, session, lock_delay
    )
    attempt = telemetry.acquiring(
        locks.client, keys, "LOCK.ACQUIREALL", mode_of(shared, None), wait
    )
    try:
        try:
            grant = _take_all(
                locks.client,
                keys,
                token,
                ttl,
                wait=wait,
                shared=shared,
                session=in_session,
                lock_delay_ms=delay_ms,
            )
        except BaseException as error:
            attempt.failed(error)
            raise
        if grant is None:
            attempt.not_granted()
            return None
        leases = [
            Lease(
                key,
                token,
                fence,
                ttl,
                acquired_at=grant.sent,
                shared=shared,
                client=locks.client,
                on_lost=on_lost,
                session=in_session,
            )
            for key, fence in zip(keys, grant.fences)
        ]
        try:
            _hold_all(locks, leases, grant, sessions)
            # A cancellation swallowed anywhere on the way ends it here, before
            # the block would run unbounded.
            raise_if_cancel_swallowed(pending)
        except BaseException as error:
            attempt.failed(error)
            for lease in leases:
                locks._forget(lease)
                locks._refresher.forget(lease)
            shielded(release_all_quietly(locks.client, keys, token))
            raise
    finally:
        if sessions is not None and in_session is not None:
            sessions.end(in_session)
    attempt.granted(grant.fences)
    for lease in leases:
        lease.start_holding(grant.answered)
    return leases


def _hold_all(
    locks: Manager,
    leases: list[Lease],
    grant: GrantAll,
    sessions: Optional[Sessions],
) -> None:
    # After a long wait the grant may be far younger than its send time: one
    # refresh of every key gives the leases a deadline the client can count on,
    # before a session counts them (a session's deadline is its earliest lease's).
    if grant.answered - grant.sent > leases[0].ttl / 3:
        _confirm_all(locks.client, leases)
    if sessions is not None:
        joined = [sessions.join(lease) for lease in leases]
        if not all(joined):
            # Granted as the manager closed: not the manager's any more.
            raise LockNotAcquired(
                leases[0].key,
                f"locks {[lease.key for lease in leases]!r}: the lock manager was"
                " closed while they were being acquired",
            )
    owner = current_owner()
    for lease in leases:
        # Held by this thread (task), as in a block: an acquire of its own that
        # conflicts would wait for itlocks.
        locks._held.setdefault(lease.key, []).append((owner, lease))
        locks._refresher.add(lease, refresh=True)


def _take_all(
    client: SyncClient,
    keys: tuple[Key, ...],
    token: Token,
    ttl: float,
    *,
    wait: Optional[float],
    shared: bool,
    session: Optional[str],
    lock_delay_ms: Optional[int],
) -> Optional[GrantAll]:
    until = state.deadline(True, wait, time.monotonic())
    while True:
        try:
            return acquire_all(
                client,
                keys,
                token,
                ttl_ms=to_ms(ttl),
                wait=state.wait_left(True, until, time.monotonic()),
                shared=shared,
                poll=POLL,
                session=session,
                lock_delay_ms=lock_delay_ms,
            )
        except ResponseError as error:
            if not is_wrongtype(error):
                raise
            # Another type at a key: busy, polled (as for ``_take``).
            if not state.may_poll(True, until, POLL, time.monotonic()):
                return None
            sleep_for(POLL)


def _confirm_all(client: SyncClient, leases: list[Lease]) -> None:
    """Restarts every lease at its ttl in one round trip and moves the deadlines;
    ``LockLost`` (the lease reported lost) if one of them is no longer held."""
    commands = [
        refresh_args(lease.key, lease.token, to_ms(lease.ttl)) for lease in leases
    ]
    sent = time.monotonic()
    replies, _ = batch(client, leases[0].key, commands)
    for lease, reply in zip(leases, replies):
        if isinstance(reply, ResponseError) and not is_wrongtype(reply):
            raise reply
        if isinstance(reply, ResponseError) or not parse_flag(reply):
            lease.report_lost(found_gone=True)
            raise lease.lost_error()
        lease.confirmed(sent, lease.ttl)


def leave_leases(locks: Manager, leases: list[Lease]) -> None:
    """Leaves ``lock_all``'s leases: none refreshed or counted by the session any
    more, then one ``LOCK.RELEASE`` per key in one write, on the refresher's own
    connection (else through the pool), as leaving a block does. Leases this
    process inherited through a fork are left to the parent."""
    if leases[0].inherited():
        return
    for lease in leases:
        locks._refresher.remove(lease)
        locks._forget(lease)
    # The session's close released those already.
    live = [lease for lease in leases if lease.lost_reason != LockLost.CLOSED]
    if not live:
        return
    sent: list[bool] = []

    def leave_on(connection: Any) -> None:
        retried = bool(sent)
        sent.append(True)
        commands = [release_args(lease.key, lease.token) for lease in live]
        replies = pipelined(connection, commands, connection.socket_timeout)
        raise_redirect(replies)
        for lease, reply in zip(live, replies):
            if isinstance(reply, ResponseError):
                if not is_wrongtype(reply):
                    raise reply
                held = False
            else:
                held = parse_flag(reply)
            if retried and not held:
                lease.left()
                continue  # the first attempt may have released it already
            lease.set_released(held)
            if not held or lease.expired():
                lease.report_lost(found_gone=not held)

    try:
        locks._refresher.on_own_connection(live[0].key, leave_on)
        return
    except (ConnectionError, TimeoutError, AskError, TryAgainError):
        pass
    try:
        exchange(
            locks.client,
            live[0].key,
            lambda connection, _spare: leave_on(connection),
            lambda own, _spare: own,
        )
    except (ConnectionError, TimeoutError) as error:
        for lease in live:
            locks._release_later(lease)
        raise ServerUnavailable(
            live[0].key, describe(locks.client, live[0].key), error
        ) from error


class ManagedMultiLock(MultiLock):
    """What ``Locks.lock_all(names, ttl)`` returns: a ``MultiLock`` of the manager's
    keys (its prefix in front of each name) whose holdings are the manager's leases,
    one per key (``leases``, in the order of the names).

    While held, the manager keeps every one of them alive: in the manager's session
    when it has one (they join it, so its ``LOCK.KEEPALIVE`` covers them and
    ``close()`` releases them), else each lease is refreshed on its own
    (``LOCK.REFRESH``) every ttl/3 by the manager's refresher; its deadline is
    watched as for ``Locks.lock``. ``ensure_held()`` raises ``LockLost`` once one of
    them is lost; ``on_lost(lease)`` is called for each lease lost. ``release()``
    (or leaving ``with``) releases every key, and raises ``LockLost`` if one was lost
    while held (unless ``lost_ok=True``; an exception of the block itself goes on
    instead). ``acquire`` returns False when the wait ends first; entering ``with``
    raises ``LockNotAcquired`` then.

    Cancelling a task while it acquires leaves nothing held; leaving the block
    releases even if the task is cancelled again."""

    def __init__(
        self,
        locks: Manager,
        names: Sequence[str],
        ttl: float,
        *,
        blocking: bool = True,
        blocking_timeout: Optional[float] = None,
        shared: bool = False,
        token: Optional[Token] = None,
        session: bool = True,
        lock_delay: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        lost_ok: bool = False,
    ) -> None:
        if isinstance(names, (str, bytes)):
            raise TypeError("the names must be a list of names, not one name")
        super().__init__(
            locks.client,
            [locks.key(name) for name in names],
            ttl,
            blocking=blocking,
            blocking_timeout=blocking_timeout,
            thread_local=False,
            shared=shared,
        )
        self.locks = locks
        self.ttl = ttl
        self.token = token
        self.session = session
        self.lock_delay = lock_delay
        self.on_lost = on_lost
        self.lost_ok = lost_ok
        # The leases of the last grant, one per key (kept after the release, as the
        # fences are), and whether they are held through this object now.
        self.leases: list[Lease] = []
        self._holding = False

    def _after_fork(self) -> None:
        """In the child of an ``os.fork()``: its leases say they are the parent's
        (``Lease.inherited``); leaving them here leaves them to the parent."""

    @property
    def time_left(self) -> float:
        """Seconds until the earliest deadline of its leases (0 when not held)."""
        if not self._holding:
            return 0.0
        return min((lease.time_left for lease in self.leases), default=0.0)

    @property
    def lost(self) -> bool:
        """Whether one of the leases held now was found lost (or its deadline
        passed)."""
        return self._holding and any(lease.expired() for lease in self.leases)

    def __enter__(self) -> ManagedMultiLock:
        if self.acquire():
            return self
        raise LockNotAcquired(
            self.names[0],
            f"locks {list(self.names)!r} were not all free within the wait",
        )

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        # An exception of the block goes on unchanged: no LockLost on top of it.
        self._leave(raise_lost=exc_type is None and not self.lost_ok)

    def acquire(
        self,
        blocking: Flag = None,
        blocking_timeout: Seconds = None,
        token: Optional[Token] = None,
    ) -> bool:
        """Takes every lock as the manager's leases; True once held, False (nothing
        held) when the wait ended first. Arguments as ``MultiLock.acquire``."""
        if self._holding:
            raise lock_error(
                LockError,
                "these locks are held already through this object: release first",
                self.names,
            )
        blocking = self.blocking if blocking is None else blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        leases = acquire_leases(
            self.locks,
            self.names,
            self.ttl,
            wait=blocking_timeout if blocking else 0,
            shared=self.shared,
            token=self.token if token is None else token,
            session=self.session,
            lock_delay=self.lock_delay,
            on_lost=self.on_lost,
        )
        if leases is None:
            return False
        self.leases = leases
        self._holding = True
        self.local.token = leases[0].token
        self.local.fences = [lease.fence for lease in leases]
        self.local.owner = current_owner()
        return True

    def ensure_held(self, check: bool = False) -> Checked:
        """Raises ``LockLost`` if one of its leases was found lost or its deadline
        has passed, without a round trip; ``check=True`` also asks the server for
        each key (awaited on asyncio)."""
        if not self._holding:
            raise lock_error(LockError, "these locks are not held", self.names)
        for lease in self.leases:
            if lease.expired():
                raise lease.lost_error()
        if check:
            return self._ask_server()
        return checked()

    def _ask_server(self) -> None:
        for lease in self.leases:
            lease.ensure_held(check=True)

    def release(self) -> None:
        """Releases every lock; ``LockLost`` if one of them was lost while held
        (unless ``lost_ok``). On asyncio it runs to its end even if the task is
        cancelled."""
        self._leave(raise_lost=not self.lost_ok)

    def reacquire(self) -> Literal[True]:
        """Restarts each lease at the ttl from now and moves its deadline;
        ``LockLost`` if one of them is no longer held."""
        if not self._holding:
            raise lock_error(LockError, "Cannot reacquire an unlocked lock", self.names)
        for lease in self.leases:
            if not self.locks.refresh(lease):
                raise lease.lost_error()
        return True

    def _leave(self, raise_lost: bool) -> None:
        if not self._holding:
            raise lock_error(
                LockError,
                "Cannot release a lock that's not owned or is already unlocked.",
                self.names,
            )
        leases = self.leases
        self._holding = False
        self.local.token = None
        if leases[0].inherited():
            return  # the parent's, which refreshes and releases them
        try:
            shielded(leave_leases(self.locks, leases))
        except LockError as failure:
            # Lost before the release failed (the server went away): the loss is
            # what the caller must hear, with the failure as its cause.
            lost = next((lease for lease in leases if lease.expired()), None)
            if lost is None:
                raise
            if raise_lost:
                raise lost.lost_error() from failure
            return
        if raise_lost:
            for lease in leases:
                if lease.expired():
                    raise lease.lost_error()
