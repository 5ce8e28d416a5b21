# Generated from fencelock/_async/locks.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""``fencelock.Locks``: the lock manager (``fencelock.Locks`` is its thread
twin, generated from this file).

    locks = Locks(redis.Redis.from_url(url))
    with locks.lock("daily-notif", ttl=60, wait=0, min_hold=30) as lease:
        ...  # lease.token, lease.fence, lease.deadline, lease.lost, ensure_held()

On entry it acquires ``<prefix><name>``: ``wait=0`` fails at once with
``LockNotAcquired`` when busy, ``wait>0`` waits that many seconds in the server's FIFO
queue, ``wait=None`` without limit. While the block runs, the manager's one refresher
(a thread, or a task on asyncio, for all its leases) refreshes the lease every ttl/3
(``auto_refresh=False`` turns that off; ``max_hold`` stops it after that many seconds)
and watches its deadline: the moment the lease is lost — the deadline passed with no
refresh confirmed, a refresh or ``guard`` refused — ``lease.lost`` is set and
``on_lost(lease)`` called; with ``cancel_on_lost=True`` (asyncio) the task running the
block is cancelled. On leaving, the lock is released, or, with ``min_hold`` and a block
that ended without an exception, its lease is cut to what is left of ``min_hold``.
Leaving after the lease was lost raises ``LockLost`` (after the clean-up) unless
``lost_ok=True``.

``shared=True`` holds the lock as one of any number of readers, ``limit=n`` as one of
at most n holders (a semaphore); each holder has its own token, fence and lease.

Sessions (``session=True``, the default where the server has them): the locks held
in the manager's blocks belong to a session, kept alive by one heartbeat
(``LOCK.KEEPALIVE name ttl`` every ttl/3 to each server where it holds something)
instead of a refresh per lease, lost together when a keepalive answers that the
server holds none of them (or when the session's deadline passes), and released
together by ``close()`` (``LOCK.CLOSE``) or on leaving ``with Locks(...)``.
Each keepalive gives a lock its own ttl again (a session per distinct ttl), or with
``session_ttl`` that one lease to all (the first grant is the lock's ttl).
``session=False``, or ``auto_refresh=False``, ``min_hold`` or ``max_hold`` on a lock,
gives that lock a lease of its own, refreshed on its own as without sessions.
``lock_delay`` (seconds, on the manager or per lock) keeps a lock whose lease ran out
taken by nobody that long (``LOCKDELAY``).

``once_result(name, keep=...)`` runs an operation once and answers every duplicate
with its stored result (``LOCK.ONCE``, ``LOCK.DONE``); ``idempotent`` is its
decorator.

``lock_all(names, ttl)`` takes several locks in one step, all or none
(``LOCK.ACQUIREALL``): a ``ManagedMultiLock`` whose holdings are leases of the
manager, kept alive by its session (or each refreshed on its own without one).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from redis.exceptions import (
    AskError,
    ConnectionError,
    LockError,
    NoPermissionError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from .. import _forks
from .. import _lockstate as lockstate
from .. import _telemetry as telemetry
from .._once import JSON, Once, Serializer, done_args, fingerprint_of
from .._protocol import (
    RELEASE,
    Key,
    Mode,
    Token,
    Value,
    check_limit,
    close_args,
    is_wrongtype,
    keepalive_args,
    mode_of,
    new_session_name,
    new_token,
    parse_flag,
    refresh_args,
    release_args,
    to_ms,
)
from .._servers import describe, node_of
from .._session import Sessions
from ..errors import (
    LockLost,
    LockNotAcquired,
    ModuleNotLoaded,
    ServerUnavailable,
    inherited_lease,
    no_lock_delay,
    self_wait_refused,
    used_before_fork,
)
from ..info import LockInfo
from . import _acquire
from ._claim import claim
from ._commands import call, on_server_of, release_quietly
from ._compat import (
    SURVIVES_FORK,
    block_runner,
    check_client,
    current_owner,
    is_own_cancel,
    ready,
    shielded,
    sleep,
)
from ._connection import command, exchange
from ._refresher import Refresher
from .info import lock_info
from .lease import Lease, OnLost, lease_end
from .multi import ManagedMultiLock

if TYPE_CHECKING:
    from .._types import SyncClient

# ``lock_all(wait=...)`` not given: its ``blocking`` and ``blocking_timeout`` decide.
_NOT_GIVEN: Any = object()
log = logging.getLogger("fencelock")
# How often an acquire looks again while the key holds another type (not a lock), or
# while its pool has no connection to spare for a wait (``_acquire._wait``).
POLL = 0.1
F = TypeVar("F", bound=Callable[..., Any])


class Locks:
    """Locks on one server or cluster that has the fencelock module loaded; every lock
    name gets ``prefix`` (default ``lock:``) in front to make its key.

    ``session=True`` (the default) puts the locks held in its blocks in a session,
    where the server has sessions (asked once per server; an older module is used
    without): one heartbeat, ``LOCK.KEEPALIVE`` every ttl/3 to each server, keeps them
    all alive, and ``close()`` or leaving ``with`` releases them all. Each
    keepalive gives a lock its own ``ttl`` again (locks of different ttls are kept in
    one session per ttl), or, with ``session_ttl=s``, every lock of the manager ``s``
    seconds (its first grant is still its own ttl).
    ``lock_delay`` (seconds; None: the server's ``fencelock.lock-delay``) is sent with
    every acquire as ``LOCKDELAY``: a lock whose lease runs out stays taken by nobody
    that long."""

    def __init__(
        self,
        client: SyncClient,
        prefix: str = "lock:",
        *,
        session: bool = True,
        session_ttl: Optional[float] = None,
        lock_delay: Optional[float] = None,
    ) -> None:
        check_client(client, "Locks")
        self.client = client
        self.prefix = prefix
        self.session = session
        self.session_ttl = session_ttl
        self.lock_delay = lock_delay
        self._sessions = Sessions(session_ttl) if session else None
        self._refresher = Refresher(client, self._sessions)
        # Per server (cluster node): whether it has sessions and LOCKDELAY.
        self._supported: dict[Any, bool] = {}
        # The leases held by a ``lock``/``holding`` block now, per key, with the thread
        # (task) running the block: for refusing an acquire that waits for itself.
        self._held: dict[Key, list[tuple[object, Lease]]] = {}
        # Whether this process has used it (sent a command, held a lease), and
        # whether it was used before the fork that made this process, where that
        # leaves it unusable (asyncio: its loop and connections stay the parent's).
        self._used = False
        self._forked_in_use = False
        _forks.track(self)

    def _after_fork(self) -> None:
        """In the child of an ``os.fork()`` (``fencelock._forks``): the leases held
        so far, their sessions and the refresher are the parent's, which keeps them
        alive; the child starts clean, with sessions of its own (new names) and its
        own refresher, started with its first lease. Its ``close()`` ends its own
        sessions only. An asyncio manager used before the fork cannot go on in the
        child (its event loop and connections are the parent's): its use there
        raises ``RuntimeError`` (``_in_this_process``)."""
        self._forked_in_use = self._forked_in_use or (self._used and not SURVIVES_FORK)
        if self._forked_in_use:
            return  # nothing of it is touched: the parent's loop owns it
        self._used = False
        self._held = {}
        if self._sessions is not None:
            self._sessions.forget_inherited()
        self._refresher.after_fork()

    def _in_this_process(self) -> None:
        """Called where the manager is used: refuses an asyncio manager carried over
        a fork after use (see ``_after_fork``)."""
        if self._forked_in_use:
            raise used_before_fork("Locks")
        self._used = True

    def key(self, name: str) -> str:
        return self.prefix + name

    def __enter__(self) -> Locks:
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        try:
            self.close()
        except LockError:
            if exc_type is None:
                raise
            # The block's own exception goes on; the session ends on its own.
            log.warning("fencelock: closing the session failed", exc_info=True)

    def close(self) -> None:
        """Ends the manager's sessions: ``LOCK.CLOSE`` to every server where they
        hold a lock or wait for one, which releases every lock of the session (each
        handed to its next waiter) and answers the session's waiting acquires nil
        (``LockNotAcquired``). A block still holding one of them finds it lost
        (``on_lost``, ``LockLost`` with ``reason="closed"``); a lease taken with
        ``acquire`` alone is marked released and lost. Locks with a lease of their
        own (``session=False``, ``min_hold``, ...) are not touched. The manager can
        be used again afterwards, in a new session. ``ServerUnavailable`` if a
        server could not be told (after trying every other): its locks there end a
        ttl after the last keepalive. The refresher, which would linger for 2 s
        after the last lease, ends before this returns, unless a lease of its own is
        still held. Runs to its end even if the task is cancelled."""
        shielded(self._close())

    # (asyncio also has close, an alias, as redis-py does)

    def _close(self) -> None:
        self._in_this_process()
        try:
            self._close_sessions()
        finally:
            # Also without sessions, and after a server could not be told: nothing
            # of the sessions is watched any more.
            self._refresher.stop_if_idle()

    def _close_sessions(self) -> None:
        if self._sessions is None:
            return
        failed: Optional[tuple[Key, Exception]] = None
        for name, keys, leases in self._sessions.close():
            for lease in leases:
                self._refresher.forget(lease)
            # The blocks learn it before the locks are handed on.
            for lease in leases:
                if self._in_block(lease):
                    lease.report_lost(reason=LockLost.CLOSED)
                else:
                    lease.closed_by_manager()
            servers: dict[Any, Key] = {}
            for key in keys:
                servers.setdefault(node_of(self.client, key), key)
            for node, key in servers.items():
                try:
                    on_server_of(self.client, key, *close_args(name))
                except (ConnectionError, TimeoutError, OSError) as error:
                    failed = failed or (key, error)
                    continue
                for lease in leases:
                    if node_of(self.client, lease.key) == node:
                        lease.set_released(True)
        if failed is not None:
            where, cause = failed
            raise ServerUnavailable(
                where,
                describe(self.client, where),
                cause,  # type: ignore[arg-type]
            ) from cause

    def _in_block(self, lease: Lease) -> bool:
        return any(held is lease for _, held in self._held.get(lease.key, []))

    def _has_sessions(self, key: Key) -> Optional[bool]:
        """Whether ``key``'s server has sessions and ``LOCKDELAY``: asked once per
        server, with a keepalive of a session that holds nothing (0, or "unknown
        command" from an older module); None when it could not be asked now."""
        ready(self.client)
        node = node_of(self.client, key)
        known = self._supported.get(node)
        if known is not None:
            return known
        try:
            on_server_of(self.client, key, *keepalive_args(new_session_name(), 1))
        except (ConnectionError, TimeoutError, OSError):
            return None
        except ResponseError as error:
            unknown = ModuleNotLoaded.from_reply("LOCK.KEEPALIVE", "", error)
            if unknown is None and not isinstance(error, NoPermissionError):
                raise
            self._supported[node] = False
        else:
            self._supported[node] = True
        return self._supported[node]

    @contextlib.contextmanager
    def lock(
        self,
        name: str,
        ttl: float,
        *,
        wait: Optional[float] = 0,
        shared: bool = False,
        limit: Optional[int] = None,
        auto_refresh: bool = True,
        min_hold: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        lost_ok: bool = False,
        cancel_on_lost: bool = False,
        token: Optional[Token] = None,
        wait_replicas: int = 0,
        wait_replicas_timeout: float = 1.0,
        session: bool = True,
        lock_delay: Optional[float] = None,
    ) -> Iterator[Lease]:
        """Holds the lock while the block runs; see the module docstring."""
        lease = self.acquire(
            name,
            ttl,
            wait=wait,
            shared=shared,
            limit=limit,
            token=token,
            wait_replicas=wait_replicas,
            wait_replicas_timeout=wait_replicas_timeout,
            session=session and _in_session(auto_refresh, min_hold, max_hold),
            lock_delay=lock_delay,
        )
        holding = self.holding(
            lease,
            auto_refresh=auto_refresh,
            min_hold=min_hold,
            max_hold=max_hold,
            on_lost=on_lost,
            lost_ok=lost_ok,
            cancel_on_lost=cancel_on_lost,
        )
        # Entered by hand: a failure to start the block (after the grant) must not
        # leave the lease held, or kept alive by the session, with nobody holding it.
        try:
            holding.__enter__()
        except BaseException:
            shielded(self._abandon(lease))
            raise
        try:
            yield lease
        except BaseException as error:
            if not holding.__exit__(type(error), error, error.__traceback__):
                raise
        else:
            holding.__exit__(None, None, None)

    @contextlib.contextmanager
    def holding(
        self,
        lease: Lease,
        *,
        auto_refresh: bool = True,
        min_hold: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        lost_ok: bool = False,
        cancel_on_lost: bool = False,
    ) -> Iterator[Lease]:
        """Holds an acquired ``lease`` while the block runs: the part of ``lock``
        after the acquire (refreshing, loss reports, leaving). A lease of a session
        is kept alive by the session as long as it holds: ``auto_refresh=False``,
        ``min_hold`` and ``max_hold`` need a lease of its own (``ValueError``; acquire
        it with ``session=False``)."""
        runner = self._begin_holding(
            lease,
            auto_refresh=auto_refresh,
            max_hold=max_hold,
            min_hold=min_hold,
            on_lost=on_lost,
            cancel_on_lost=cancel_on_lost,
        )
        # The block runs inside the holding's span (its spans are children).
        lease.holding.enter()
        try:
            yield lease
        except BaseException as error:
            lease.holding.leave()
            if not self._end_holding(lease, runner, error, None, lost_ok):
                raise
            return
        lease.holding.leave()
        self._end_holding(lease, runner, None, min_hold, lost_ok)

    def _begin_holding(
        self,
        lease: Lease,
        *,
        auto_refresh: bool,
        min_hold: Optional[float],
        max_hold: Optional[float],
        on_lost: Optional[OnLost],
        cancel_on_lost: bool,
    ) -> Any:
        """The start of ``holding``: the lease watched (and refreshed, or counted by
        its session) from now on, held by this thread (task). What it returns goes
        to ``_end_holding``. ``Election`` holds its leaderships with the two."""
        self._in_this_process()
        if lease.session is not None and not _in_session(
            auto_refresh, min_hold, max_hold
        ):
            raise ValueError(
                "auto_refresh=False, min_hold and max_hold need a lease of its own:"
                " the session keeps its leases alive until they are released;"
                " acquire it with session=False"
            )
        lease.on_lost = on_lost
        runner = lease.runner = block_runner(cancel_on_lost)
        # Held by this thread (task) while the block runs: an acquire of its own that
        # conflicts would wait for itself.
        self._held.setdefault(lease.key, []).append((current_owner(), lease))
        if max_hold is not None:
            lease.refresh_until = lease.acquired_at + max_hold
        self._refresher.add(lease, refresh=auto_refresh)
        return runner

    def _end_holding(
        self,
        lease: Lease,
        runner: Any,
        error: Optional[BaseException],
        min_hold: Optional[float],
        lost_ok: bool,
    ) -> bool:
        """The end of ``holding``, the block left with ``error`` (None: it ended
        well): released, or cut to ``min_hold``; ``LockLost`` after a loss unless
        ``lost_ok``. True when ``error`` is the cancellation that ``cancel_on_lost``
        sent and it is to be swallowed (``lost_ok``); False when it goes on."""
        lease.runner = None
        if lease.inherited():
            # A block this process inherited through a fork: the lock is the
            # parent's, which refreshes and releases it; the child leaves it alone.
            return False
        if error is not None:
            own_cancel = lease.cancelled_runner and is_own_cancel(error, runner)
            # The block's own error goes on unchanged: a release that fails too (the
            # server down, say) leaves the lease to run out by itself.
            with contextlib.suppress(Exception):
                shielded(self._leave_after_refresher(lease, None))
            if not own_cancel:
                return False
            # Cancelled because the lease was lost (cancel_on_lost).
            if not lost_ok:
                raise lease.lost_error() from error
            return True
        try:
            shielded(self._leave_after_refresher(lease, min_hold))
        except LockError as failure:
            # A lease lost before the release failed (the server went away, its
            # deadline passed): the loss is what the block must hear, as LockLost,
            # with the failure to release as its cause.
            if not lease.expired():
                raise
            if not lost_ok:
                raise lease.lost_error() from failure
            return False
        if not lost_ok and lease.expired():
            raise lease.lost_error()
        return False

    def lock_all(
        self,
        names: Sequence[str],
        ttl: float,
        *,
        wait: Any = _NOT_GIVEN,
        blocking: bool = True,
        blocking_timeout: Optional[float] = None,
        shared: bool = False,
        token: Optional[Token] = None,
        session: bool = True,
        lock_delay: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        lost_ok: bool = False,
    ) -> ManagedMultiLock:
        """The locks ``names`` (each with the prefix) to take together, all or none:
        ``with locks.lock_all(["a", "b"], ttl=30) as held:`` waits (without
        limit by default; ``wait`` seconds as for ``lock``, 0 for one try, None
        without limit; or redis-py's ``blocking_timeout`` / ``blocking=False``)
        until every one is free for it, in one place of every queue at once,
        then holds them all while the block runs (``LockNotAcquired`` if the wait
        ends first). ``held.fences`` are the fences in the order of ``names``,
        ``held.leases`` the leases. In the manager's session (``session=True``,
        where the server has sessions) one keepalive covers them; otherwise each is
        refreshed on its own. ``shared=True`` takes each as a reader; ``token``,
        ``lock_delay``, ``on_lost`` and ``lost_ok`` as for ``lock``. On a cluster the
        keys must share a slot (hash-tag the names). A wait that would close a cycle
        with another owner raises ``Deadlock``; nothing is taken then."""
        if wait is not _NOT_GIVEN:
            blocking, blocking_timeout = wait != 0, wait
        return ManagedMultiLock(
            self,
            names,
            ttl,
            blocking=blocking,
            blocking_timeout=blocking_timeout,
            shared=shared,
            token=token,
            session=session,
            lock_delay=lock_delay,
            on_lost=on_lost,
            lost_ok=lost_ok,
        )

    def once(
        self,
        name: str,
        ttl: float,
        *,
        min_hold: Optional[float] = None,
        max_hold: Optional[float] = None,
        auto_refresh: bool = True,
        on_lost: Optional[OnLost] = None,
        lost_ok: bool = False,
        cancel_on_lost: bool = False,
        session: bool = True,
        lock_delay: Optional[float] = None,
    ) -> Callable[[F], F]:
        """A decorator for a job that must run once across servers (a cron job):
        each call takes the lock ``name`` without waiting and runs the function
        while holding it (``min_hold`` keeps it that long after a quick success, so a
        server whose clock is late finds it still held); when another holds it, the
        call logs, skips and returns None. The other options as for ``lock``."""

        def decorate(function: F) -> F:
            @functools.wraps(function)
            def run(*args: Any, **kwargs: Any) -> Any:
                try:
                    lease = self.acquire(
                        name,
                        ttl,
                        wait=0,
                        session=session
                        and _in_session(auto_refresh, min_hold, max_hold),
                        lock_delay=lock_delay,
                    )
                except LockNotAcquired:
                    log.info("fencelock: %r is held elsewhere; skipped", name)
                    return None
                with self.holding(
                    lease,
                    auto_refresh=auto_refresh,
                    min_hold=min_hold,
                    max_hold=max_hold,
                    on_lost=on_lost,
                    lost_ok=lost_ok,
                    cancel_on_lost=cancel_on_lost,
                ):
                    return function(*args, **kwargs)

            return run  # type: ignore[return-value]

        return decorate

    @contextlib.contextmanager
    def once_result(
        self,
        name: str,
        ttl: float = 30.0,
        *,
        keep: float,
        wait: Optional[float] = None,
        fingerprint: Any = None,
        serializer: Serializer = JSON,
        token: Optional[Token] = None,
        session: bool = True,
        on_lost: Optional[OnLost] = None,
        cancel_on_lost: bool = False,
    ) -> Iterator[Once]:
        """Runs an operation once and answers every duplicate with its result
        (``LOCK.ONCE``); ``name`` (with the prefix) names the operation, an
        idempotency key::

            with locks.once_result(f"order-{id}", keep=86400) as once:
                if not once.replayed:
                    once.set(charge(order))  # stored on leaving the block
            return once.result

        The first caller runs the block holding ``once.lease`` (its fence, refreshed
        every ttl/3 or kept by the manager's session, watched as in ``lock``);
        leaving it without an exception stores the value given to ``once.set``
        (``LOCK.DONE``) for ``keep`` seconds. A lease lost before that stores
        nothing and raises ``LockLost``; an exception in the block gives the run up
        (``LOCK.RELEASE``): the next duplicate runs it, under a higher fence.
        A duplicate gets ``once.replayed`` and the stored ``once.result`` at once
        when the run is done, or after waiting for it in the server's queue while
        it runs: ``wait`` seconds, None (the default) without limit, 0 not at all;
        ``LockNotAcquired`` when the wait ends first. ``fingerprint``: a str or
        bytes digest of the request, or any JSON value (hashed); a claim with
        another fingerprint than the run's raises ``FingerprintMismatch``.
        ``serializer`` (``dumps``/``loads``) makes the stored bytes: JSON by
        default, bytes passed through."""
        self._in_this_process()
        key = self.key(name)
        token = new_token() if token is None else token
        if wait != 0:
            self._refuse_waiting_for_itself(key, "exclusive")
        _, sessions, in_session = self._begin_in_session(key, ttl, session, None)
        try:
            with telemetry.acquiring(
                self.client, (key,), "LOCK.ONCE", "exclusive", wait
            ) as attempt:
                claimed, sent = claim(
                    self.client,
                    key,
                    token,
                    ttl_ms=to_ms(ttl),
                    keep_ms=to_ms(keep),
                    wait=wait,
                    fingerprint=fingerprint_of(fingerprint),
                    session=in_session,
                    poll=POLL,
                )
                if claimed is None:
                    raise LockNotAcquired(key, f"run {key!r} is running elsewhere")
                if not claimed.granted:
                    replay = Once(key, claimed.fence, serializer, stored=claimed.result)
                    attempt.replayed(claimed.fence)
                else:
                    grant = _acquire.Grant(claimed.fence, sent, time.monotonic())
                    lease = self._hold_grant(
                        key, token, grant, ttl, sessions, in_session
                    )
                    attempt.granted(lease.fence)
        finally:
            if sessions is not None and in_session is not None:
                sessions.end(in_session)
        if not claimed.granted:
            yield replay
            return
        try:
            runner = self._begin_holding(
                lease,
                auto_refresh=True,
                min_hold=None,
                max_hold=None,
                on_lost=on_lost,
                cancel_on_lost=cancel_on_lost,
            )
        except BaseException:
            shielded(self._abandon(lease))
            raise
        once = Once(key, lease.fence, serializer, lease=lease)
        # The run's block inside the holding's span, as for ``lock``.
        lease.holding.enter()
        try:
            yield once
            payload = once.payload()
        except BaseException as error:
            lease.holding.leave()
            if not self._end_holding(lease, runner, error, None, False):
                raise
            return
        finally:
            lease.holding.leave()
        shielded(self._store(lease, payload))

    def _store(self, lease: Lease, payload: bytes) -> None:
        """The end of a run that went well: its result stored (``LOCK.DONE``), the
        holding turned into the done record (so nothing refreshes or releases it
        any more); ``LockLost`` if the run was no longer this lease's."""
        lease.runner = None
        if lease.inherited():
            return  # a forked child's copy of the block: the parent stores it
        self._refresher.remove(lease)
        self._forget(lease)
        try:
            stored = parse_flag(
                call(
                    self.client, lease.key, *done_args(lease.key, lease.token, payload)
                )
            )
        except (ConnectionError, TimeoutError) as error:
            # Stored or not, unknown. If not, the run must end rather than be kept
            # alive by its session: released before the session's next keepalive
            # there (a release of a done record changes nothing); a lease of its
            # own runs out at its ttl.
            self._release_later(lease)
            raise ServerUnavailable(
                lease.key, describe(self.client, lease.key), error
            ) from error
        except BaseException:
            # Refused (a result over fencelock.max-result-length): the run still
            # holds; given up so that a duplicate runs it rather than waits.
            release_quietly(self.client, lease.key, lease.token)
            lease.set_released(True)
            raise
        if not stored:
            lease.report_lost(found_gone=True)
            raise lease.lost_error()
        lease.set_released(True)

    def idempotent(
        self,
        *,
        key: Callable[..., str],
        keep: float,
        ttl: float = 30.0,
        wait: Optional[float] = None,
        fingerprint: Optional[Callable[..., Any]] = None,
        serializer: Serializer = JSON,
        session: bool = True,
    ) -> Callable[[F], F]:
        """A decorator that runs a function once per ``key(*args, **kwargs)`` (an
        operation's name, as for ``once_result``) and answers every duplicate call
        within ``keep`` seconds with the first call's result: stored by
        ``serializer`` (JSON by default, bytes passed through), waited for while the
        first call runs. The first call returns its own value; an exception it
        raises stores nothing, and the next duplicate runs it again.
        ``fingerprint(*args, **kwargs)``, when given, is the request's fingerprint
        (``FingerprintMismatch`` if a call with the same key has another)."""

        def decorate(function: F) -> F:
            @functools.wraps(function)
            def run(*args: Any, **kwargs: Any) -> Any:
                with self.once_result(
                    key(*args, **kwargs),
                    ttl,
                    keep=keep,
                    wait=wait,
                    fingerprint=None
                    if fingerprint is None
                    else fingerprint(*args, **kwargs),
                    serializer=serializer,
                    session=session,
                ) as once:
                    if not once.replayed:
                        once.set(function(*args, **kwargs))
                return once.result

            return run  # type: ignore[return-value]

        return decorate

    def acquire(
        self,
        name: str,
        ttl: float,
        *,
        wait: Optional[float] = 0,
        shared: bool = False,
        limit: Optional[int] = None,
        token: Optional[Token] = None,
        wait_replicas: int = 0,
        wait_replicas_timeout: float = 1.0,
        session: bool = False,
        lock_delay: Optional[float] = None,
        value: Optional[Value] = None,
    ) -> Lease:
        """Takes the lock; ``LockNotAcquired`` if busy for the whole ``wait``.
        Nothing refreshes or watches the lease (see ``lock`` and ``holding``), unless
        ``session=True`` puts it in the manager's session (where the server has
        sessions): the session then keeps it alive, and watches it, until
        ``release`` or ``close``. ``wait_replicas=n`` also waits until n replicas
        have the grant, else releases it and raises ``NotReplicated``: a grant that
        only the primary knows is lost if it fails over, and granted again to
        someone else. ``shared=True`` takes it as a reader, ``limit=n`` one of a
        semaphore's n permits; ``WrongMode`` if the lock is held in another mode.
        ``lock_delay`` (seconds) overrides the manager's. ``value``: the public value
        an exclusive holding carries (``VALUE``; ``Election`` proclaims its leader
        with it)."""
        self._in_this_process()
        key = self.key(name)
        token = new_token() if token is None else token
        if wait != 0:  # one try answers busy, as ever; only a wait could be endless
            self._refuse_waiting_for_itself(key, mode_of(shared, check_limit(limit)))
        delay_ms, sessions, in_session = self._begin_in_session(
            key, ttl, session, lock_delay
        )
        try:
            with telemetry.acquiring(
                self.client, (key,), "LOCK.ACQUIRE", mode_of(shared, limit), wait
            ) as attempt:
                grant = self._take(
                    key,
                    token,
                    ttl,
                    wait=wait,
                    shared=shared,
                    limit=limit,
                    wait_replicas=wait_replicas,
                    wait_replicas_timeout=wait_replicas_timeout,
                    session=in_session,
                    lock_delay_ms=delay_ms,
                    value=value,
                )
                lease = self._hold_grant(
                    key,
                    token,
                    grant,
                    ttl,
                    sessions,
                    in_session,
                    shared=shared or limit is not None,
                    limit=limit,
                )
                attempt.granted(lease.fence)
        finally:
            if sessions is not None and in_session is not None:
                sessions.end(in_session)
        return lease

    def _hold_grant(
        self,
        key: Key,
        token: Token,
        grant: _acquire.Grant,
        ttl: float,
        sessions: Optional[Sessions],
        in_session: Optional[str],
        *,
        shared: bool = False,
        limit: Optional[int] = None,
    ) -> Lease:
        """The lease of a grant (an acquire's, a run-once claim's), with a deadline
        the client can count on, joined to the manager's session when it began in
        one (``_begin_in_session``). A failure gives the grant up."""
        lease = Lease(
            key,
            token,
            grant.fence,
            ttl,
            acquired_at=grant.sent,
            shared=shared,
            limit=limit,
            client=self.client,
            session=in_session,
        )
        # After a long wait the grant may be far younger than its send time: one
        # refresh gives the lease a deadline the client can count on, before a
        # session counts it (a session's deadline is its earliest lease's).
        try:
            if grant.answered - grant.sent > ttl / 3 and not self.refresh(lease):
                raise lease.lost_error()
        except BaseException:
            if sessions is not None:
                # Nobody will hold it: the session must not keep it alive.
                shielded(release_quietly(self.client, key, token))
            raise
        if sessions is not None and not sessions.join(lease):
            # Granted as the manager closed: not the manager's any more.
            shielded(release_quietly(self.client, key, token))
            raise LockNotAcquired(
                key,
                f"lock {key!r}: the lock manager was closed while it was being"
                " acquired",
            )
        if sessions is not None:
            try:
                self._refresher.add(lease, refresh=True)
            except BaseException:
                shielded(self._abandon(lease))
                raise
        lease.start_holding(grant.answered)
        return lease

    def _take(
        self,
        key: Key,
        token: Token,
        ttl: float,
        *,
        wait: Optional[float],
        shared: bool,
        limit: Optional[int],
        wait_replicas: int,
        wait_replicas_timeout: float,
        session: Optional[str],
        lock_delay_ms: Optional[int],
        value: Optional[Value],
    ) -> _acquire.Grant:
        until = lockstate.deadline(True, wait, time.monotonic())
        while True:
            try:
                grant = _acquire.acquire(
                    self.client,
                    key,
                    token,
                    ttl_ms=to_ms(ttl),
                    wait=lockstate.wait_left(True, until, time.monotonic()),
                    wait_replicas=wait_replicas,
                    replicas_timeout=wait_replicas_timeout,
                    shared=shared,
                    limit=limit,
                    poll=POLL,
                    session=session,
                    lock_delay_ms=lock_delay_ms,
                    value=value,
                )
            except ResponseError as error:
                if not is_wrongtype(error):
                    raise
                # Another type at the key (an old redis-py lock during a migration):
                # busy, as for the drop-in, polled since the server cannot queue us.
                if not lockstate.may_poll(True, until, POLL, time.monotonic()):
                    raise LockNotAcquired(key) from None
                sleep(POLL)
                continue
            if grant is None:
                raise LockNotAcquired(key)
            return grant

    def _begin_in_session(
        self, key: Key, ttl: float, session: bool, lock_delay: Optional[float]
    ) -> tuple[Optional[int], Optional[Sessions], Optional[str]]:
        """What an acquire on ``key``'s server starts with: its lock-delay in ms (the
        manager's unless given; ``no_lock_delay`` where the server has none), and,
        when it is to join the manager's session and the server has sessions, that
        session's bookkeeping and the place it begins there (ended by the caller)."""
        delay = self.lock_delay if lock_delay is None else lock_delay
        delay_ms = None if delay is None else to_ms(delay)
        joins = session and self._sessions is not None
        if joins or delay_ms is not None:
            has = self._has_sessions(key)
            if delay_ms is not None and has is False:
                raise no_lock_delay(key, describe(self.client, key))
            joins = joins and bool(has)
        sessions = self._sessions if joins else None
        in_session = (
            None
            if sessions is None
            else sessions.begin(key, to_ms(ttl), node_of(self.client, key))
        )
        return delay_ms, sessions, in_session

    def _refuse_waiting_for_itself(self, key: Key, mode: Mode) -> None:
        """An acquire that conflicts with a lease this thread (task) holds in a block
        of this manager would wait for itself: refused at once (``WrongMode``). A
        lease taken with ``acquire`` alone may be released by anyone, so it does not
        count."""
        owner = current_owner()
        held = [lease for lease in self._held.get(key, []) if not lease[1].expired()]
        self._held[key] = held
        if not held:
            del self._held[key]
        for holder, lease in held:
            if holder == owner and "exclusive" in (lease.mode, mode):
                raise self_wait_refused(key, lease.mode, "this lock manager")

    def _check_lease(self, lease: Lease) -> None:
        """A lease is used only in the process that acquired it: a forked child's
        refresh or release of its parent's holding is refused (``LockError``)."""
        self._in_this_process()
        if lease.inherited():
            raise inherited_lease(lease.key, lease.pid)

    def _abandon(self, lease: Lease) -> None:
        """A lease granted whose block could not start (its watch failed to begin,
        say): nothing holds it, so nothing may keep it alive. No longer watched nor
        counted by its session, and released; a release that fails is sent again
        before its session's next keepalive there (which would keep it alive), a
        lease of its own runs out at its ttl. Best effort: the error that got us
        here is what the caller hears."""
        self._forget(lease)
        with contextlib.suppress(Exception):
            self._refresher.forget(lease)
        if lease.session is not None and self._sessions is not None:
            self._sessions.leave(lease)
        try:
            reply = call(self.client, lease.key, *release_args(lease.key, lease.token))
        except Exception:
            if lease.session is not None and self._sessions is not None:
                self._sessions.release_later(lease)
            return
        lease.set_released(parse_flag(reply))

    def _forget(self, lease: Lease) -> None:
        held = [one for one in self._held.get(lease.key, []) if one[1] is not lease]
        if held:
            self._held[lease.key] = held
        else:
            self._held.pop(lease.key, None)

    def refresh(self, lease: Lease, ttl: Optional[float] = None) -> bool:
        """Restarts the lease at ``ttl`` (default: the lease's own) from now and moves
        its deadline; False, and the lease reported lost, if the token no longer
        holds the lock."""
        self._check_lease(lease)
        seconds = lease.ttl if ttl is None else ttl
        sent = time.monotonic()
        # A shorter ttl shortens the lease as soon as the server has it, answered or
        # not.
        lease.deadline = min(lease.deadline, lease_end(sent, seconds))
        if self._refresh_ms(lease, to_ms(seconds)):
            lease.confirmed(sent, seconds)
            return True
        lease.report_lost(found_gone=True)
        return False

    def release(self, lease: Lease) -> bool:
        """Releases the lock if this lease still holds it; ``lease.released`` says.
        Finding it gone reports the lease lost. A lease of a session leaves it."""
        self._check_lease(lease)
        try:
            reply = call(self.client, lease.key, *release_args(lease.key, lease.token))
        except (ConnectionError, TimeoutError):
            self._release_later(lease)
            raise
        lease.set_released(parse_flag(reply))
        self._forget(lease)
        if lease.session is not None:
            self._refresher.forget(lease)
        if not lease.released:
            lease.report_lost(found_gone=True)
        return lease.released

    def leave(self, lease: Lease, min_hold: Optional[float] = None) -> None:
        """Releases the lock, or cuts the lease to what is left of ``min_hold``."""
        self._check_lease(lease)
        hold_ms = lease.hold_left_ms(min_hold, time.monotonic())
        if hold_ms > 0:
            if not self._refresh_ms(lease, hold_ms):
                lease.report_lost(found_gone=True)
            lease.left()
        else:
            self.release(lease)

    def _release_later(self, lease: Lease) -> None:
        """A release of a lease of a session failed: the session must not keep the
        holding alive, so its next keepalive there releases it first."""
        if lease.session is not None and self._sessions is not None:
            self._refresher.forget(lease)
            self._sessions.release_later(lease)

    def info(self, name: str) -> Optional[LockInfo]:
        """``LOCK.INFO`` of the lock ``name`` as a dict (None: free, nobody waits)."""
        self._in_this_process()
        return lock_info(self.client, self.key(name))

    def _refresh_ms(self, lease: Lease, ttl_ms: int) -> bool:
        args = refresh_args(lease.key, lease.token, ttl_ms)
        return parse_flag(call(self.client, lease.key, *args))

    def _leave_after_refresher(self, lease: Lease, min_hold: Optional[float]) -> None:
        """Leaves a held block on the refresher's own connection, so that waiters that
        fill a bounded pool cannot keep a holder from releasing (their lock would stay
        held, and they would wait, until its lease ran out). The refresher lets go of
        the lease first, so no refresh is in flight when the release is sent (one
        arriving after it would find, and report, the lock lost). Should that
        connection fail, the client's pool (and its retries) carries the release."""
        sent: list[bool] = []
        # Before taking the connection: a refresh of this lease may be using it.
        self._refresher.remove(lease)
        self._forget(lease)

        def leave_on(connection: Any) -> None:
            if lease.lost_reason == LockLost.CLOSED:
                return  # the session's close released it
            hold_ms = lease.hold_left_ms(min_hold, time.monotonic())
            if lease.expired() or not hold_ms:
                args = release_args(lease.key, lease.token)
            else:
                args = refresh_args(lease.key, lease.token, hold_ms)
            retried = bool(sent)
            sent.append(True)
            try:
                held = parse_flag(command(connection, *args))
            except ResponseError as error:
                if not is_wrongtype(error):
                    raise
                held = False
            if retried and not held and args[0] == RELEASE:
                # The first attempt may have released it already: not a loss.
                lease.left()
                return
            if args[0] == RELEASE:
                lease.set_released(held)
            if not held or lease.expired():
                lease.report_lost(found_gone=not held)
            else:
                lease.left()  # cut to min_hold: the holder is done with it

        try:
            self._refresher.on_own_connection(lease.key, leave_on)
            return
        except (ConnectionError, TimeoutError, AskError, TryAgainError):
            pass
        try:
            exchange(
                self.client,
                lease.key,
                lambda connection, _spare: leave_on(connection),
                lambda own, _spare: own,
            )
        except (ConnectionError, TimeoutError) as error:
            self._release_later(lease)
            raise ServerUnavailable(
                lease.key, describe(self.client, lease.key), error
            ) from error


def _in_session(
    auto_refresh: bool, min_hold: Optional[float], max_hold: Optional[float]
) -> bool:
    """Whether a lock held so may be one of the session's: the session keeps every
    holding alive until it is released, so a lease that must run out on its own
    (no refresh, ``max_hold``) or outlive its block (``min_hold``) needs its own."""
    return auto_refresh and not min_hold and max_hold is None
