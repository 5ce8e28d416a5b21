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
from types import SimpleNamespace, TracebackType
from typing import TYPE_CHECKING, Any, Literal, Optional, TypeVar, Union

from redis.exceptions import LockError, LockNotOwnedError, ResponseError

from .. import _forks
from .. import _lockstate as state
from .._protocol import (
    Args,
    Key,
    Mode,
    Token,
    check_keys,
    fence_args,
    is_wrongtype,
    mode_of,
    parse_flag,
    refresh_args,
    release_args,
    to_ms,
)
from ..errors import LockLost, LockNotAcquired, ServerUnavailable, lock_error
from ._acquire import acquire_all
from ._commands import module_missing, reaching
from ._compat import Checked, check_client, checked, current_owner, new_local, shielded
from ._compat import sleep as sleep_for
from ._connection import batch
from .lease import Lease, OnLost

if TYPE_CHECKING:
    from .._types import SyncClient
    from .locks import Locks

logger = logging.getLogger(__name__)

Number = Union[int, float]
Seconds = Optional[Number]
Flag = Optional[bool]
M = TypeVar("M", bound="MultiLock")


class MultiLock:
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
        check_client(redis, _public_name(type(self)))
        self.redis = redis
        self.names: tuple[Key, ...] = check_keys(names)
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.shared = shared
        self._per_task = shared or per_task
        self.local: Any = self._new_local()
        if shared:
            state.check_shared_timeout(timeout)

    def _new_local(self) -> Any:
        local = new_local(self._per_task) if self.thread_local else SimpleNamespace()
        local.token = None
        local.fences = []
        # The child of an ``os.fork()`` starts without the parent's tokens.
        _forks.track(self)
        return local

    def _after_fork(self) -> None:
        """In the child of an ``os.fork()`` (``fencelock._forks``): what the parent
        held through this object stays the parent's; the child holds nothing
        through it."""
        self.local = self._new_local()

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

    def __enter__(self: M) -> M:
        if self.acquire():
            return self
        raise lock_error(
            LockError, "Unable to acquire lock within the time specified", self.names
        )

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except ServerUnavailable:
            raise  # not a lock found unlocked: the server could not be asked
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning(
                "Lock was unlocked or no longer owned when exiting context manager."
            )

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
        while True:
            wait = state.wait_left(blocking, deadline, time.monotonic())
            try:
                grant = acquire_all(
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
                    return False
                sleep_for(self.sleep)
                continue
            if grant is None:
                return False
            self.local.token = encoded
            self.local.fences = grant.fences
            self.local.owner = current_owner()
            return True

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
            raise
        self.local.token = None

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

    def _token(self) -> Optional[Token]:
        # Another thread's local storage starts empty: no token there means not ours.
        return getattr(self.local, "token", None)

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
        locks: Locks,
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
        leases = self.locks._acquire_all(
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
            shielded(self.locks._leave_all(leases))
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


def _public_name(kind: type) -> str:
    ours = (c for c in kind.__mro__ if c.__module__.startswith("fencelock."))
    return next(ours, MultiLock).__name__
