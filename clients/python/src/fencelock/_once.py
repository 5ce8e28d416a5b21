"""Run once, the part without I/O shared by the sync and asyncio clients: the
``LOCK.ONCE`` and ``LOCK.DONE`` arguments, the three shapes of a claim's reply, the
fingerprint of a request, the serializers of a stored result, and ``Once``, what
``Locks.once_result`` gives its block.

A result is stored in the server as bytes. The default serializer, ``JSON``, writes
any JSON value as its UTF-8 text (readable by every client and by ``redis-cli``) and
passes bytes through behind one marker byte, ``0xff``, which no UTF-8 text starts
with: a duplicate gets back bytes for bytes and the JSON value otherwise."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional, Protocol, Union

from ._protocol import Args, Key, Token, as_bytes, block_ms

ONCE = "LOCK.ONCE"
DONE = "LOCK.DONE"

Fingerprint = Union[str, bytes]
# What marks a result stored as raw bytes (never the first byte of UTF-8 text).
RAW_MARK = b"\xff"


class Serializer(Protocol):
    """How a run's result becomes the bytes stored by ``LOCK.DONE`` and back (the
    ``json`` and ``pickle`` modules have this shape)."""

    def dumps(self, value: Any) -> Union[str, bytes]: ...

    def loads(self, data: bytes) -> Any: ...


class JsonSerializer:
    """JSON text for any JSON value; bytes (bytearray, memoryview) as they are,
    behind ``RAW_MARK``, given back as ``bytes``."""

    def dumps(self, value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return RAW_MARK + bytes(value)
        return json.dumps(value, separators=(",", ":")).encode()

    def loads(self, data: bytes) -> Any:
        if data[:1] == RAW_MARK:
            return data[1:]
        return json.loads(data)


JSON = JsonSerializer()


def fingerprint_of(request: Any) -> Optional[Fingerprint]:
    """What ``FINGERPRINT`` carries for ``request``: a str or bytes as it is (a digest
    made by the caller, at most ``fencelock.max-token-length`` bytes), anything else
    as ``sha256:`` and the hex digest of its JSON with sorted keys (a request's body
    as a dict, say); None sends none, which matches any."""
    if request is None or isinstance(request, (str, bytes)):
        return request
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def once_args(
    key: Key,
    ttl_ms: int,
    keep_ms: int,
    token: Token,
    wait: Optional[float],
    *,
    fingerprint: Optional[Fingerprint] = None,
    session: Optional[Token] = None,
) -> Args:
    """``LOCK.ONCE``; ``wait`` as for an acquire (0 or None from a try: no BLOCK)."""
    args: Args = (ONCE, key, ttl_ms, "KEEP", keep_ms, "TOKEN", token)
    timeout = block_ms(wait)
    if timeout is not None:
        args += ("BLOCK", timeout)
    if session is not None:
        args += ("SESSION", session)
    if fingerprint is not None:
        args += ("FINGERPRINT", fingerprint)
    return args


def done_args(key: Key, token: Token, result: bytes) -> Args:
    return (DONE, key, token, result)


@dataclass(frozen=True)
class Claim:
    """A claim answered: the run granted to the caller (``result`` None), or the
    result stored by the run of ``fence``."""

    fence: int
    result: Optional[bytes]

    @property
    def granted(self) -> bool:
        return self.result is None


def parse_claim(reply: Any) -> Optional[Claim]:
    """``[token, fence]`` (run it), ``[nil, fence, result]`` (done), or nil (it
    runs elsewhere: None)."""
    if reply is None:
        return None
    if reply[0] is not None:
        return Claim(int(reply[1]), None)
    return Claim(int(reply[1]), as_bytes(reply[2]))


class Once:
    """What ``with locks.once_result(...) as once`` gives its block.

    A duplicate (``once.replayed``, as Stripe's ``Idempotent-Replayed`` header):
    ``once.result`` is the stored result and ``once.fence`` the fence of the run that
    produced it; the block should return it without doing the work.

    The runner (``once.lease`` is its ``Lease``: ``fence``, auto-refresh, ``lost``):
    does the work and hands its outcome to ``once.set(value)``; leaving the block
    without an exception stores it (``LOCK.DONE``; never set: None), for every
    duplicate within ``keep``. An exception gives the run up, stored nothing, and the
    next duplicate runs it under a higher fence."""

    def __init__(
        self,
        key: Key,
        fence: int,
        serializer: Serializer,
        *,
        lease: Any = None,
        stored: Optional[bytes] = None,
    ) -> None:
        self.key = key
        self.fence = fence
        self.lease = lease
        self.serializer = serializer
        self.replayed = stored is not None
        self.result: Any = None if stored is None else serializer.loads(stored)
        self._payload: Optional[bytes] = None

    def set(self, value: Any) -> None:
        """The run's result, stored when the block ends well; serialized now, so a
        value the serializer refuses fails inside the block (and gives the run up)."""
        if self.replayed:
            raise RuntimeError(
                f"run {self.key!r} was done already: a duplicate cannot set its result"
            )
        self._payload = as_bytes(self.serializer.dumps(value))
        self.result = value

    def payload(self) -> bytes:
        """The bytes ``LOCK.DONE`` stores: the value set, else None serialized."""
        if self._payload is None:
            self._payload = as_bytes(self.serializer.dumps(None))
        return self._payload

    def __repr__(self) -> str:
        role = "replayed" if self.replayed else "runs"
        return f"Once(key={self.key!r}, fence={self.fence}, {role})"
