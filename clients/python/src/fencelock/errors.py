"""Exceptions of the locks, the lock managers and of guarded and fenced calls. Each
derives from redis-py's ``LockError``, so code that already catches lock errors from
``redis.lock.Lock`` keeps catching these."""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from redis.exceptions import (
    ConnectionError,
    LockError,
    LockNotOwnedError,
    MaxConnectionsError,
    RedisError,
    ResponseError,
)

from ._protocol import Key, Mode, deadlock, is_wrongsession, wrong_mode

# How a server without the module answers a LOCK.* command (redis-py drops the "ERR ").
UNKNOWN_COMMAND = "unknown command"


def lock_error(cls: type[LockError], message: str, name: object) -> LockError:
    """Builds a redis-py lock error carrying ``lock_name`` where redis-py sets it (a
    ``MultiLock``'s: its tuple of names).

    The attribute is set afterwards, and the message put in ``args`` (redis-py 5's
    ``LockError`` keeps its own arguments there, which ``str`` would show), so the same
    code reads the same on every supported version."""
    error = cls(message)
    error.lock_name = name  # type: ignore[assignment]
    return error


def _restored(
    kind: type[Exception], args: tuple[Any, ...], state: dict[str, Any]
) -> Any:
    """An exception of this package as it was pickled: its arguments and attributes
    as they were, without running its ``__init__`` again."""
    error = Exception.__new__(kind)
    error.args = args
    error.__dict__.update(state)
    return error


class LockNotAcquired(LockError):
    """The lock was held by another token (for the whole ``wait``, if one was given)."""

    def __init__(self, key: Key, message: Optional[str] = None) -> None:
        message = message or f"lock {key!r} is held by someone else"
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.key = key
        # Where redis-py's own lock errors carry the name.
        self.lock_name = key  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restored, (type(self), self.args, self.__dict__))


class LockLost(LockNotOwnedError):
    """The lease ended (expired, deleted, taken over) while its holder still worked:
    found by its deadline, by a refresh or a release, or by ``guard`` when the server
    refused the guarded command (``NOTHELD``: nothing ran). A ``LockNotOwnedError``,
    which redis-py raises when a lock is used after its lease ended, so handlers of
    either catch it.

    ``reason`` says how it was found, and the message what that means:
    ``"deadline"`` (no refresh was confirmed in time: the lease may have run out on
    the server), ``"gone"`` (the server no longer had it for this token while its
    lease could not have run out yet: someone released or deleted it, or the server
    lost it in a restart or failover), ``"not-held"`` (the server no longer had it,
    and the client cannot tell whether the lease had run out first) or ``"closed"``
    (its lock manager was closed, which ended its session, while it was held)."""

    DEADLINE = "deadline"
    GONE = "gone"
    NOT_HELD = "not-held"
    CLOSED = "closed"
    MEANING: ClassVar[dict[str, str]] = {
        DEADLINE: "its deadline passed with no refresh confirmed, so its lease may"
        " have ended on the server",
        GONE: "the server no longer had it for this token before its lease could"
        " have ended: it was released or deleted by someone else (a DEL, a FLUSHDB),"
        " or lost in a server restart or failover",
        NOT_HELD: "the server no longer has it for this token: its lease ended, or it"
        " was released or deleted by someone else",
        CLOSED: "its lock manager was closed while it was held, which released every"
        " lock of its session",
    }

    def __init__(self, key: Key, reason: str = NOT_HELD) -> None:
        meaning = self.MEANING.get(reason, self.MEANING[self.NOT_HELD])
        message = f"lock {key!r} was lost: {meaning}"
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.key = key
        self.reason = reason
        # Where redis-py's own lock errors carry the name.
        self.lock_name = key  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as it is (multiprocessing and Celery send a job's exception back
        # so): unpickling would otherwise call ``LockLost(message)``.
        return (_restored, (type(self), self.args, self.__dict__))

    @classmethod
    def in_words_of_redis_py(cls, key: Key, said: str, name: object) -> LockLost:
        """The loss as a drop-in lock reports it: redis-py's own words first (code
        that matches them keeps working), then what the loss means; ``name`` is
        the lock's ``lock_name`` (a ``MultiLock``'s: its tuple of names)."""
        error = cls(key)
        message = f"{said}: {error.args[0]}"
        error.args = (message,)
        error.lock_name = name  # type: ignore[assignment]
        return error


class StaleFence(LockError):
    """``LOCK.FENCED`` refused the command: its fence is below the highest that the
    mark has admitted, so a newer holder has written since; nothing ran. ``highest``
    is that fence."""

    def __init__(self, mark: Key, fence: int, highest: int) -> None:
        message = (
            f"mark {mark!r}: fence {fence} is below the highest admitted ({highest})"
        )
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.mark = mark
        self.fence = fence
        self.highest = highest


class NotReplicated(LockError):
    """``wait_replicas`` replicas did not acknowledge the grant in time.

    The grant was released again: on a failover it could have been lost, and a new
    primary would grant the same lock to someone else."""

    def __init__(self, key: Key, wanted: int, acknowledged: int) -> None:
        message = (
            f"lock {key!r}: {acknowledged} of {wanted} replicas acknowledged the grant"
            " in time; released it"
        )
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.key = key
        self.wanted = wanted
        self.acknowledged = acknowledged


class WrongMode(LockError, ResponseError):
    """The server refused an acquire in another mode than the lock is held in
    (``-WRONGMODE``); nothing changed, and waiting would not help. ``mode`` is how the
    key (or, for a token that already holds it, that holding) is held: ``"exclusive"``,
    ``"shared"`` or ``"semaphore"``, with ``limit`` for a semaphore; the message is the
    server's.

    For example a semaphore asked for with another ``limit`` than its holders', a
    reader (``shared``) on a semaphore, or a token that holds a read lock asking for
    the write lock (there is no upgrade: release first). A ``LockError`` like every
    error of this package, and also a ``ResponseError``, as the error reply it is."""

    def __init__(
        self, key: Key, message: str, mode: Optional[Mode], limit: Optional[int]
    ) -> None:
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.key = key
        self.mode = mode
        self.limit = limit
        self.lock_name = key  # type: ignore[assignment]
        self.status_code = "WRONGMODE"

    @classmethod
    def from_reply(cls, key: Key, error: ResponseError) -> Optional[WrongMode]:
        """The error for a ``WRONGMODE`` reply; None for any other error."""
        parsed = wrong_mode(error)
        if parsed is None:
            return None
        return cls(key, str(error), *parsed)


class WrongSession(LockError, ResponseError):
    """The server refused an acquire because its token already holds the lock in
    another session (or outside any session while the acquire names one, or the
    reverse): ``-WRONGSESSION``. Nothing changed: the holding keeps its session and
    its lease (it was not renewed). Only a chosen ``token=`` can meet it (random
    tokens are never shared); the message is the server's. A ``LockError`` and a
    ``ResponseError``, as ``WrongMode``."""

    def __init__(self, key: Key, message: str) -> None:
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.key = key
        self.lock_name = key  # type: ignore[assignment]
        self.status_code = "WRONGSESSION"

    @classmethod
    def from_reply(cls, key: Key, error: ResponseError) -> Optional[WrongSession]:
        """The error for a ``WRONGSESSION`` reply; None for any other error."""
        if not is_wrongsession(error):
            return None
        return cls(key, str(error))


class Deadlock(LockError, ResponseError):
    """The server refused to let an acquire wait (``-DEADLOCK``): waiting would close
    a cycle, each owner waiting for a lock another one holds, and so would never end.
    An owner is a lock manager's session (``Locks``), else a token. Nothing changed and
    nothing was queued: the locks the requester holds are still held, so release one
    (or all) of them before trying again, or take every lock of a job at once
    (``Locks.lock_all``, ``MultiLock``), which never waits while holding.

    ``key`` is the key asked for through which the cycle runs, ``held`` the key held
    by the requester's own owner where the cycle closes; the message is the server's.
    Raised by waiting acquires of every kind (``Lock``, ``Locks.lock``,
    ``Locks.lock_all``, ``MultiLock``). A ``LockError``, and a ``ResponseError``, as
    the error reply it is."""

    def __init__(self, key: Key, message: str, held: str) -> None:
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.key = key
        self.held = held
        self.lock_name = key  # type: ignore[assignment]
        self.status_code = "DEADLOCK"

    @classmethod
    def from_reply(cls, key: Key, error: ResponseError) -> Optional[Deadlock]:
        """The error for a ``DEADLOCK`` reply; None for any other error."""
        parsed = deadlock(error)
        if parsed is None:
            return None
        return cls(key, str(error), parsed[1])


class FingerprintMismatch(LockError, ResponseError):
    """The server refused a run-once claim (``Locks.once_result``, ``idempotent``)
    whose fingerprint differs from the one the key was claimed with, while that run
    is going or its result is kept (``-FINGERPRINT``): the same idempotency key sent
    with another request, which Stripe and the IETF Idempotency-Key draft answer
    422. Nothing changed, nothing ran. The message is the server's; a ``LockError``
    and a ``ResponseError``, as ``WrongMode``."""

    def __init__(self, key: Key, message: str) -> None:
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.key = key
        self.lock_name = key  # type: ignore[assignment]
        self.status_code = "FINGERPRINT"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restored, (type(self), self.args, self.__dict__))

    @classmethod
    def from_reply(
        cls, key: Key, error: ResponseError
    ) -> Optional[FingerprintMismatch]:
        """The error for a ``FINGERPRINT`` reply; None for any other error."""
        if not str(error).startswith("FINGERPRINT "):
            return None
        return cls(key, str(error))


class ModuleNotLoaded(LockError):
    """The server answered a ``LOCK.*`` command with "unknown command": the fencelock
    module is not loaded there. ``server`` names it; nothing was sent to any other
    server. (The server's own message, which repeats the command's arguments and so
    the token, is not kept.)"""

    def __init__(self, command: str, server: str) -> None:
        message = (
            f"{command} is an unknown command on {server}: the fencelock module is not"
            " loaded there. Load it at start: add `loadmodule /path/to/fencelock.so`"
            " to its redis.conf, or start it with `--loadmodule /path/to/fencelock.so`"
            " (the file a release ships; /usr/lib/redis/modules/fencelock.so from the"
            " .deb, target/release/libfencelock.so when built from source)."
            " (`MODULE LOAD /path/to/fencelock.so` works"
            " on a running server only if it runs with `enable-module-command yes`,"
            " or `local` for a client on the same host; Redis refuses it by default.)"
        )
        if command in ("LOCK.ACQUIREALL", "LOCK.ONCE", "LOCK.DONE"):
            message += (
                " If other LOCK.* commands work there, its module predates"
                f" {command}: upgrade it."
            )
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.command = command
        self.server = server

    @classmethod
    def from_reply(
        cls, command: str, server: str, error: ResponseError
    ) -> Optional[ModuleNotLoaded]:
        text = str(error)
        if text.startswith("ERR "):
            text = text[4:]
        if not text.lower().startswith(UNKNOWN_COMMAND):
            return None
        return cls(command, server)


# What redis-py's pools raise when they have no connection to hand out: a full
# ``ConnectionPool`` ("Too many connections", a ``MaxConnectionsError`` on newer
# redis-py), a ``BlockingConnectionPool`` whose ``timeout`` passed.
POOL_HAD_NONE = ("Too many connections", "No connection available.")


def _pool_had_none(error: RedisError) -> bool:
    return isinstance(error, MaxConnectionsError) or str(error) in POOL_HAD_NONE


class ServerUnavailable(LockError, ConnectionError):
    """An acquire could not reach the server, or the server did not answer in time
    (the wait plus the client's socket timeout), after the client's own retries; or
    the client's bounded pool had no connection to give it (the message says which).
    Any holding the acquire may have made was released (best effort). A
    ``LockError`` for ``except LockError`` and a redis-py ``ConnectionError``."""

    def __init__(self, key: Key, server: str, error: RedisError) -> None:
        if _pool_had_none(error):
            # The server was never asked: say so, rather than blame it.
            message = (
                f"lock {key!r}: the client's connection pool had no connection to"
                f" {server} to give: {error}"
            )
        else:
            message = f"lock {key!r}: no answer from {server}: {error}"
        super().__init__(message)
        self.args = (message,)  # redis-py 5 keeps its own arguments there
        self.key = key
        self.server = server
        self.lock_name = key  # type: ignore[assignment]


def no_lock_delay(key: Key, server: str) -> LockError:
    """``lock_delay`` asked of a server whose module predates it (no sessions, no
    ``LOCKDELAY``), or that has none, or whose user may not run ``LOCK.KEEPALIVE``:
    refused before anything was sent."""
    return lock_error(
        LockError,
        "lock_delay needs a fencelock module with sessions and lock-delay"
        f" (LOCK.KEEPALIVE, LOCKDELAY): {server} does not run LOCK.KEEPALIVE for this"
        " client (an older module, none, or a user without the permission)",
        key,
    )


def self_wait_refused(key: Key, held: Mode, through: str) -> WrongMode:
    """The error of an acquire that would wait for a holding of its own thread or task
    (an upgrade, a downgrade, a second exclusive hold): it would wait forever, so it
    is refused at once; nothing was sent."""
    wording = {
        "exclusive": "exclusively",
        "shared": "shared",
        "semaphore": "as a permit",
    }
    return WrongMode(
        key,
        f"{key!r} is held {wording[held]} by this thread (task) through {through}:"
        " waiting for it would wait for itself; release it first (there is no upgrade"
        " or downgrade)",
        held,
        None,
    )


def used_before_fork(what: str) -> RuntimeError:
    """The error of an asyncio lock manager used in the child of an ``os.fork()``
    after its parent had used it: its event loop, its refresher task and its
    connections are the parent's and cannot go on here (waiting on them could hang
    forever), so it is refused at once."""
    return RuntimeError(
        f"this fencelock.asyncio.{what} was used before os.fork(), in the parent"
        " process: an asyncio lock manager cannot be carried into a forked child with"
        " its event loop and connections. Make the redis.asyncio client and the"
        f" fencelock.asyncio.{what} in the child (after the fork: a gunicorn or Celery"
        " worker's start, the multiprocessing job), or use the multiprocessing"
        " 'spawn' or 'forkserver' start method"
    )


def inherited_lease(key: Key, pid: int) -> LockError:
    """The error of a forked child's refresh or release of a lease its parent
    acquired: the holding is the parent's, which keeps refreshing and releases it."""
    return lock_error(
        LockError,
        f"lock {key!r}: this lease was acquired by process {pid}, and this process"
        " is its forked child: the holding stays the parent's (refreshed and released"
        " there); acquire the lock in this process instead",
        key,
    )
