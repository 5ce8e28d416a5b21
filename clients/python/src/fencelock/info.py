"""``LOCK.INFO`` as a dict: its result type and the parsing of the reply, shared by the
sync and asyncio ``lock_info``."""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict, Union, cast

from ._protocol import Mode

# How ``LOCK.INFO`` says a lock is held: a mode, or ``"quarantined"`` (a lease with a
# lock-delay ran out: nobody holds it, nobody is admitted until the delay ends).
InfoMode = Union[Mode, Literal["quarantined", "done"]]


class LockInfo(TypedDict):
    """What the server tells anyone about a lock (never a token).

    ``held``: someone holds it; ``fence``: the holding's fence, or the highest among
    shared holders (None when not held); ``ttl_ms``: the lease left in ms, for shared
    holders the latest one's (-1 without expiry, None when not held); ``waiters``:
    clients queued with ``BLOCK``, of which ``waiters_exclusive`` ask for the lock
    alone and ``waiters_shared`` as readers or for a permit.

    ``mode``: ``"exclusive"``, ``"shared"`` (readers) or ``"semaphore"`` (None when not
    held), or ``"quarantined"`` while a lease with a lock-delay that ran out keeps the
    lock from everyone (``held`` False, ``ttl_ms`` the delay left); ``holders``: how
    many hold it now (0 when not held); ``limit``: a semaphore's number of permits
    (None for the other modes); ``in_session``: how many of the holders belong to a
    session (0 from a module without sessions); ``value``: the exclusive holder's
    public value (``VALUE``, ``LOCK.PROCLAIM``: an election's leader), ``""`` when it
    set none, None when the lock is not held exclusively (or the module is older);
    ``str`` or ``bytes`` as the client decodes replies.
    A run-once key (``Locks.once_result``): ``state`` ``"running"`` or ``"done"``
    (None for any other lock), ``keep_ms`` (running: the keep time its result will
    have; done: what is left of it, also in ``ttl_ms``) and ``result_size`` (bytes,
    0 while running); a done key has ``mode`` ``"done"``, ``held`` False and the
    fence of the run that stored its result. Neither the result nor the fingerprint
    is shown."""

    held: bool
    fence: Optional[int]
    ttl_ms: Optional[int]
    waiters: int
    mode: Optional[InfoMode]
    holders: int
    limit: Optional[int]
    waiters_exclusive: int
    waiters_shared: int
    in_session: int
    value: Optional[Union[str, bytes]]
    state: Optional[Literal["running", "done"]]
    keep_ms: Optional[int]
    result_size: Optional[int]


def parse_info(reply: Any) -> Optional[LockInfo]:
    """``LOCK.INFO``'s field/value pairs; None when the lock is free, nobody waiting.

    A module without shared holders sends only the first four fields: the others are
    then what they are for its exclusive locks."""
    if reply is None:
        return None
    fields = {_text(name): value for name, value in zip(reply[::2], reply[1::2])}
    held = bool(fields["held"])
    waiters = int(fields["waiters"])
    mode = fields.get("mode", "exclusive" if held else None)
    return LockInfo(
        held=held,
        fence=_optional_int(fields["fence"]),
        ttl_ms=_optional_int(fields["ttl-ms"]),
        waiters=waiters,
        mode=None if mode is None else cast(InfoMode, _text(mode)),
        holders=int(fields.get("holders", 1 if held else 0)),
        limit=_optional_int(fields.get("limit")),
        waiters_exclusive=int(fields.get("waiters-exclusive", waiters)),
        waiters_shared=int(fields.get("waiters-shared", 0)),
        in_session=int(fields.get("in-session", 0)),
        value=fields.get("value"),
        state=None
        if fields.get("state") is None
        else cast(Literal["running", "done"], _text(fields["state"])),
        keep_ms=_optional_int(fields.get("keep-ms")),
        result_size=_optional_int(fields.get("result-size")),
    )


def no_permit_free(info: Optional[LockInfo], limit: int) -> bool:
    """Whether an acquire of one of ``limit`` permits would have to wait now: they are
    all held (by the key's own limit, if it has one), the lock is held in another mode,
    or others already wait (the queue is FIFO, nobody overtakes it). A quarantined
    lock counts as taken (``LOCK.INFO`` does not say how many of its permits are)."""
    if info is None:
        return False
    if info["waiters"] > 0 or info["mode"] == "quarantined":
        return True
    if not info["held"]:
        return False
    if info["mode"] != "semaphore":
        return True
    return info["holders"] >= (info["limit"] or limit)


def _text(value: Union[str, bytes]) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _optional_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)
