"""The decisions of the drop-in locks that do not touch the network: token encoding,
lease length, and how long an acquire may still wait. Shared by ``fencelock.Lock`` and
``fencelock.asyncio.Lock`` so both follow redis-py's rules the same way."""

from __future__ import annotations

from typing import Any, Optional, Union

from ._protocol import new_token, to_ms

Number = Union[int, float]


def encode_token(client: Any, token: Any) -> bytes:
    """The token as bytes, encoded by the client's own encoder as redis-py does (so a
    ``decode_responses`` client and a bytes one agree); a new random one if None."""
    if token is None:
        return new_token().encode()
    pool = getattr(client, "connection_pool", None)
    if pool is not None and hasattr(pool, "get_encoder"):
        return pool.get_encoder().encode(token)  # type: ignore[no-any-return]
    if hasattr(client, "get_encoder"):  # cluster clients have no single pool
        return client.get_encoder().encode(token)  # type: ignore[no-any-return]
    return token.encode() if isinstance(token, str) else bytes(token)


def ttl_ms(timeout: Optional[Number]) -> Optional[int]:
    """The lease in ms; None (no expiry) for a missing or zero timeout, as redis-py."""
    return to_ms(timeout) if timeout else None


def check_shared_timeout(timeout: Optional[Number]) -> None:
    """A shared holder (a reader, a semaphore's permit) always has a lease: each one
    ends on its own on the server, and ``PERSIST``, which makes an exclusive lock
    permanent, cannot keep one. Nor should it: a permit of a client that died would
    be lost for good."""
    if not timeout:
        raise ValueError(
            "a shared lock or a semaphore needs a timeout: every holder has a lease"
        )


def deadline(
    blocking: bool, blocking_timeout: Optional[Number], now: float
) -> Optional[float]:
    """When waiting must stop; None when it may go on forever (or never starts)."""
    if not blocking or blocking_timeout is None:
        return None
    return now + blocking_timeout


def wait_asked(blocking: bool, blocking_timeout: Optional[Number]) -> Optional[float]:
    """The wait the caller asked for, as telemetry reports it: 0 one try, None
    forever, else seconds (not what is left of it once the request is made)."""
    if not blocking:
        return 0
    return None if blocking_timeout is None else float(blocking_timeout)


def wait_left(blocking: bool, deadline: Optional[float], now: float) -> Optional[float]:
    """The ``wait`` for the next request: 0 one try, None forever, else seconds."""
    if not blocking:
        return 0
    if deadline is None:
        return None
    return max(0.0, deadline - now)


def may_poll(
    blocking: bool, deadline: Optional[float], sleep: Number, now: float
) -> bool:
    """Whether to sleep and try again, by redis-py's rule: not past the deadline."""
    return blocking and (deadline is None or now + sleep <= deadline)
