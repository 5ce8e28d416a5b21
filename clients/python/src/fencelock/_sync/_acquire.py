# Generated from fencelock/_async/_acquire.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""One acquire, shared by the drop-in locks and the lock managers: ``LOCK.ACQUIRE``
(``LOCK.ACQUIREALL`` for several keys at once) with a client token and the server's
``BLOCK`` for waiting, on a pooled connection that reads for as long as the wait needs
(``_connection``), and the clean-up that keeps a failed acquire from leaving a holding
behind. A cancellation while waiting (or after the request may have been granted)
releases the token's holdings before the ``CancelledError`` goes on.

A wait never holds the last connection of a bounded pool (``_wait``): the holder
needs one for its own commands, and the drop-in for its release."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from .._plan import Plan
from .._protocol import (
    Key,
    Token,
    Value,
    named_key,
    persist_all_args,
    persist_args,
    wait_args,
)
from .._servers import check_one_slot, describe
from ..errors import (
    Deadlock,
    NotReplicated,
    ServerUnavailable,
    WrongMode,
    WrongSession,
)
from ._commands import call, module_missing, release_all_quietly
from ._compat import cancellations, raise_if_cancel_swallowed, shielded, sleep
from ._connection import command, exchange

# How often a wait that may not hold the pool's last connection tries, unless the
# caller says (the drop-in passes its ``sleep``, as redis-py's lock polls by it).
POLL = 0.1
# Never less, even with ``sleep=0``: the connection given back must reach whoever
# waits for it (a woken thread or task) before this waiter takes it again.
MIN_PAUSE = 0.01


@dataclass(frozen=True)
class Grant:
    fence: int
    # When the acquire that was granted was sent, and when its reply arrived, on the
    # monotonic clock: the lease ends no earlier than ``sent`` + ttl.
    sent: float
    answered: float


@dataclass(frozen=True)
class GrantAll:
    """A ``LOCK.ACQUIREALL`` grant: one fence per key, in the order of the keys."""

    fences: list[int]
    sent: float
    answered: float


def acquire(
    client: Any,
    key: Key,
    token: Token,
    *,
    ttl_ms: Optional[int],
    wait: Optional[float],
    wait_replicas: int = 0,
    replicas_timeout: float = 1.0,
    shared: bool = False,
    limit: Optional[int] = None,
    poll: float = POLL,
    session: Optional[Token] = None,
    lock_delay_ms: Optional[int] = None,
    value: Optional[Value] = None,
) -> Optional[Grant]:
    """Asks for the lock at ``key`` for ``token``; the grant, or None if busy.

    ``ttl_ms=None`` makes a lock without expiry. ``wait``: 0 tries once, None waits
    forever, else seconds in the server's FIFO queue. ``shared`` asks for a shared
    holding (a reader), ``limit=n`` for one of a semaphore's n permits; a shared
    holding needs a ttl. ``session`` makes the holding one of that session's,
    ``lock_delay_ms`` sends ``LOCKDELAY``, ``value`` the holding's public ``VALUE``.
    Error replies (``WRONGTYPE`` too) are raised, ``WRONGMODE`` as ``WrongMode``,
    ``WRONGSESSION`` as ``WrongSession``, ``DEADLOCK`` as ``Deadlock``, "unknown
    command" as ``ModuleNotLoaded``; nothing was granted then.
    A server that cannot be reached or does not answer in time raises
    ``ServerUnavailable``. Any failure after the request may have been granted (lost
    connection, interrupt, failed ``WAIT``) releases ``token``'s holding before the
    error propagates. ``poll``: how often a wait that may not hold the pool's last
    connection tries (``_wait``)."""
    plan = Plan.make(
        key,
        token,
        ttl_ms,
        wait,
        wait_replicas,
        replicas_timeout,
        shared=shared,
        limit=limit,
        session=session,
        lock_delay_ms=lock_delay_ms,
        value=value,
    )
    granted = _run(client, plan, (key,), poll, permanent=ttl_ms is None)
    if granted is None:
        return None
    return Grant(granted.fences[0], granted.sent, granted.answered)


def acquire_all(
    client: Any,
    keys: tuple[Key, ...],
    token: Token,
    *,
    ttl_ms: Optional[int],
    wait: Optional[float],
    shared: bool = False,
    limit: Optional[int] = None,
    poll: float = POLL,
    session: Optional[Token] = None,
    lock_delay_ms: Optional[int] = None,
) -> Optional[GrantAll]:
    """Asks for every lock of ``keys`` at once for ``token`` (``LOCK.ACQUIREALL``):
    all of them, with one fence per key in the order given, or None (busy, or the
    wait ended) and none of them. As ``acquire`` otherwise: the same options, errors
    and clean-up (a failure after the request may have been granted releases every
    key's holding of ``token``).

    Always sent on a connection borrowed from the pool of the first key's server,
    also without a wait: a cluster client's own routing would look the command's keys
    up with an extra ``COMMAND GETKEYS``; here the first key (argument 2) decides,
    ``MOVED``/``ASK`` are followed, and keys of several slots raise redis-py's
    ``ClusterCrossSlotError`` before anything is sent."""
    check_one_slot(client, keys)
    plan = Plan.make(
        keys[0],
        token,
        ttl_ms,
        wait,
        0,
        1.0,
        shared=shared,
        limit=limit,
        session=session,
        lock_delay_ms=lock_delay_ms,
        keys=keys,
    )
    return _run(client, plan, keys, poll, permanent=ttl_ms is None)


def _run(
    client: Any, plan: Plan, keys: tuple[Key, ...], poll: float, *, permanent: bool
) -> Optional[GrantAll]:
    """One acquire by ``plan``, of ``keys`` (the plan's key, or all of a
    ``LOCK.ACQUIREALL``), and the clean-up of a failed one; ``permanent``: made
    without expiry after the grant (``PERSIST``)."""
    key, token, wait_replicas = plan.key, plan.token, plan.wait_replicas
    pending = cancellations()
    sent = [time.monotonic()]
    try:
        if plan.blocks or wait_replicas or plan.keys is not None:
            fences, acknowledged = _wait(client, key, plan, sent, poll)
        else:
            fences = plan.parse(client.execute_command(*plan.args()))
            acknowledged = None
        raise_if_cancel_swallowed(pending)
    except ResponseError as error:
        # Refused: nothing was granted (and a token that holds in another mode keeps
        # that holding), so there is nothing to release.
        named = named_key(error, keys) if plan.keys is not None else key
        refused = (
            WrongMode.from_reply(named, error)
            or WrongSession.from_reply(named, error)
            or Deadlock.from_reply(named, error)
            or module_missing(client, key, plan.args(), error)
        )
        if refused is None:
            raise
    except (ConnectionError, TimeoutError) as error:
        shielded(release_all_quietly(client, keys, token))
        raise ServerUnavailable(key, describe(client, key), error) from error
    except BaseException:
        shielded(release_all_quietly(client, keys, token))
        raise
    else:
        refused = None
    if refused is not None:
        # Raised outside the handler: the server's message repeats the arguments (the
        # token among them) and must not ride along as ``__context__``.
        raise refused
    if fences is None:
        return None
    grant = GrantAll(fences, sent[0], time.monotonic())
    try:
        if acknowledged is not None and acknowledged < wait_replicas:
            raise NotReplicated(key, wait_replicas, acknowledged)
        if permanent:
            if plan.keys is None:
                call(client, key, *persist_args(key, token))
            else:
                call(client, key, *persist_all_args(keys, token))
    except BaseException:
        shielded(release_all_quietly(client, keys, token))
        raise
    return grant


def _wait(
    client: Any, key: Key, plan: Plan, sent: list[float], poll: float
) -> tuple[Optional[list[int]], Optional[int]]:
    """The acquire that may wait (or is followed by ``WAIT``), on a borrowed
    connection: one ``BLOCK`` for the whole wait, in the server's FIFO queue, when the
    pool could still hand out another connection besides this one; else one try, the
    connection given back, and another try every ``poll`` seconds until the wait ends
    (each try borrows again, and waits in the queue once the pool has room).

    Why: a wait holds its connection for as long as it waits. Waiters that take every
    connection of a bounded pool leave none for the holder's own commands (its work
    under the lock, the drop-in's release), so the holder waits for a connection, the
    waiters for the lock, and nothing moves until the pool's timeout: the holder's
    commands fail, its lease may run out under it. A wait that leaves one connection
    free cannot do that, and where the pool has room nothing changes.

    Why tries, not short ``BLOCK`` slices: a slice holds the last connection for its
    length, so every command of the holder would wait up to a slice per waiter queued
    for the pool (and fail at once on a ``ConnectionPool`` that raises when
    exhausted), while gaining nothing: during the slice the holder cannot release
    through that connection anyway. A try holds it for one round trip, like each poll
    of redis-py's own lock. The price, only on a pool that is full: such a waiter has
    no place in the queue (anyone may overtake it) and sees a release up to ``poll``
    late. A connection the pool could not hand out at all (its timeout, "Too many
    connections") raises as for any command, as ``ServerUnavailable``."""
    while True:
        fence, acknowledged, tried = exchange(
            client,
            key,
            lambda connection, spare: _exchange(connection, plan, sent, spare),
            plan.read_timeout,
        )
        if fence is not None or not tried:
            return fence, acknowledged
        left = plan.left(time.monotonic())
        if left is not None and left <= 0:
            return None, None
        # Given back meanwhile: the holder's commands (and any other) get it.
        pause = max(poll, MIN_PAUSE)
        sleep(pause if left is None else min(pause, left))


def _exchange(
    connection: Any, plan: Plan, sent: list[float], spare: bool
) -> tuple[Optional[list[int]], Optional[int], bool]:
    """The acquire and, after a grant, ``WAIT`` on the same connection; whether it
    was a try in place of a wait (``spare``: see ``_wait``). Runs again after a lost
    connection: the token makes the repeated acquire the same grant, and it asks only
    for the time left of the wait."""
    tried = plan.blocks and not spare
    sent[0] = time.monotonic()
    args = plan.args(sent[0], block=not tried)
    fences = plan.parse(command(connection, *args))
    if fences is None or not plan.wait_replicas:
        return fences, None, tried
    reply = command(connection, *wait_args(plan.wait_replicas, plan.replicas_timeout))
    return fences, int(reply), tried
