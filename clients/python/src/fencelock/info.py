"""``LOCK.INFO`` as a dict: its result type and the parsing of the reply, shared by the
sync and asyncio ``lock_info``."""

from __future__ import annotations

from typing import Any, Optional, TypedDict, Union, cast

from ._protocol import Mode


class LockInfo(TypedDict):
    """What the server tells anyone about a lock (never a token).

    ``held``: someone holds it; ``fence``: the holding's fence, or the highest among
    shared holders (None when not held); ``ttl_ms``: the lease left in ms, for shared
    holders the latest one's (-1 without expiry, None when not held); ``waiters``:
    clients queued with ``BLOCK``, of which ``waiters_exclusive`` ask for the lock
    alone and ``waiters_shared`` as readers or for a permit.

    ``mode``: ``"exclusive"``, ``"shared"`` (readers) or ``"semaphore"`` (None when not
    held); ``holders``: how many hold it now (0 when not held); ``limit``: a
    semaphore's number of permits (None for the other modes)."""

    held: bool
    fence: Optional[int]
    ttl_ms: Optional[int]
    waiters: int
    mode: Optional[Mode]
    holders: int
    limit: Optional[int]
    waiters_exclusive: int
    waiters_shared: int


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
        mode=None if mode is None else cast(Mode, _text(mode)),
        holders=int(fields.get("holders", 1 if held else 0)),
        limit=_optional_int(fields.get("limit")),
        waiters_exclusive=int(fields.get("waiters-exclusive", waiters)),
        waiters_shared=int(fields.get("waiters-shared", 0)),
    )


def no_permit_free(info: Optional[LockInfo], limit: int) -> bool:
    """Whether an acquire of one of ``limit`` permits would have to wait now: they are
    all held (by the key's own limit, if it has one), the lock is held in another mode,
    or others already wait (the queue is FIFO, nobody overtakes it)."""
    if info is None:
        return False
    if info["waiters"] > 0:
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
