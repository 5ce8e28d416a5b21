"""``LOCK.INFO`` as a dict: its result type, the parsing of the reply, and the call for
sync clients (``fencelock.asyncio.lock_info`` is the asyncio one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, TypedDict, Union

from ._protocol import Key, info_args

if TYPE_CHECKING:
    from ._types import SyncClient


class LockInfo(TypedDict):
    """What the server tells anyone about a lock (never its token).

    ``held``: someone holds it; ``fence``: the current holding's fence (None when not
    held); ``ttl_ms``: the lease left in ms (-1 without expiry, None when not held);
    ``waiters``: clients queued with ``BLOCK``."""

    held: bool
    fence: Optional[int]
    ttl_ms: Optional[int]
    waiters: int


def parse_info(reply: Any) -> Optional[LockInfo]:
    """``LOCK.INFO``'s field/value pairs; None when the lock is free, nobody waiting."""
    if reply is None:
        return None
    fields = {_text(name): value for name, value in zip(reply[::2], reply[1::2])}
    return LockInfo(
        held=bool(fields["held"]),
        fence=_optional_int(fields["fence"]),
        ttl_ms=_optional_int(fields["ttl-ms"]),
        waiters=int(fields["waiters"]),
    )


def lock_info(client: SyncClient, key: Key) -> Optional[LockInfo]:
    """The state of the lock at ``key`` (the full key: no prefix is added)."""
    return parse_info(client.execute_command(*info_args(key)))


def _text(value: Union[str, bytes]) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _optional_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)
