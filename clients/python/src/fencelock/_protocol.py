"""The fencelock wire protocol: argument lists for the ``LOCK.*`` commands, the parsing
of their replies, tokens and time conversions. Pure functions with no I/O, shared by the
sync and the asyncio clients so that both send byte-for-byte the same commands."""

from __future__ import annotations

import math
import re
import secrets
from typing import Any, Literal, Optional, Union

from redis.exceptions import ResponseError

Token = Union[str, bytes]
# The public value of an exclusive holding (an election's leader: ``VALUE``,
# ``LOCK.PROCLAIM``), sent as redis-py sends any argument.
Value = Union[str, bytes]
Key = Union[str, bytes, memoryview]
Args = tuple[Any, ...]
# How a lock is held, as ``LOCK.INFO`` names it: one holder, any number of shared
# holders (readers), or at most ``limit`` of them (a semaphore's permits).
Mode = Literal["exclusive", "shared", "semaphore"]

ACQUIRE = "LOCK.ACQUIRE"
ACQUIREALL = "LOCK.ACQUIREALL"
REFRESH = "LOCK.REFRESH"
RELEASE = "LOCK.RELEASE"
FENCE = "LOCK.FENCE"
INFO = "LOCK.INFO"
GUARD = "LOCK.GUARD"
FENCED = "LOCK.FENCED"
KEEPALIVE = "LOCK.KEEPALIVE"
CLOSE = "LOCK.CLOSE"
HELD = "LOCK.HELD"
PROCLAIM = "LOCK.PROCLAIM"
OBSERVE = "LOCK.OBSERVE"

# The error of a guard whose token does not hold the lock, and of a fence below the
# mark's highest, whose text ends with that highest: "STALE ... admitted (41)".
NOTHELD = "NOTHELD"
STALE = re.compile(r"^STALE .*\((\d+)\)\s*$")
# An acquire in another mode than the key's holders (or than the token's own holding):
# "WRONGMODE <key> is a semaphore with limit 5", "... is held shared", "... is held
# exclusively". The key may contain anything, so the reply is read from its end.
WRONGMODE = re.compile(
    r"^WRONGMODE .* is (?:a semaphore with limit (?P<limit>\d+)|held (?P<held>shared"
    r"|exclusively))\s*$",
    re.DOTALL,
)

# A wait that would close a cycle of owners waiting for each other (nothing changed,
# nothing queued): "DEADLOCK waiting for <key> would wait for <other key> held by this
# owner". Keys may contain anything, so the reply is read from both ends.
DEADLOCK = re.compile(
    r"^DEADLOCK waiting for (?P<key>.*) would wait for (?P<held>.*) held by this"
    r" owner\s*$",
    re.DOTALL,
)

# A lock without a timeout (redis-py's ``timeout=None``) is granted with this lease and
# then made permanent by PERSIST_IF_HELD: if the client dies in between, the key still
# expires instead of being held forever.
PROVISIONAL_TTL_MS = 60_000

# PERSIST only while the token holds the lock, in one atomic step. LOCK.FENCE with a
# token is the module's own owner check (nil unless that token holds it).
PERSIST_IF_HELD = """
if redis.call('LOCK.FENCE', KEYS[1], ARGV[1]) then
    redis.call('PERSIST', KEYS[1])
    return 1
end
return 0
"""

# The same for the keys of one ``LOCK.ACQUIREALL``: all of them, or none if the token
# no longer holds one of them.
PERSIST_ALL_IF_HELD = """
for _, key in ipairs(KEYS) do
    if not redis.call('LOCK.FENCE', key, ARGV[1]) then
        return 0
    end
end
for _, key in ipairs(KEYS) do
    redis.call('PERSIST', key)
end
return 1
"""


def new_token() -> str:
    """128 bits from the OS CSPRNG as 32 hex characters, the shape of a server token.

    Sent with every acquire so that a re-sent acquire (redis-py retries after a lost
    connection) is the module's idempotent re-acquire, not a second, orphaned grant."""
    return secrets.token_hex(16)


def new_session_name() -> str:
    """A session's name: 128 bits from the OS CSPRNG, as secret as a token (whoever
    knows it can keep the session's locks alive or close them)."""
    return secrets.token_hex(16)


def to_ms(seconds: float) -> int:
    """Seconds to whole milliseconds, truncated as redis-py's own lock does."""
    return int(seconds * 1000)


def block_ms(wait: Optional[float]) -> Optional[int]:
    """The ``BLOCK`` argument for a wait: None sends no BLOCK (one try), 0 waits
    forever.

    The server reads ``BLOCK 0`` as "forever", so a wait that rounds down to nothing
    must be one try, and a positive wait is rounded up so it never ends early."""
    if wait is None:
        return 0
    if wait <= 0:
        return None
    return max(1, math.ceil(wait * 1000))


def check_limit(limit: Optional[int]) -> Optional[int]:
    """A semaphore's limit as given, if it is one (an int >= 1); the server checks the
    upper bound (``fencelock.max-holders``)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    return limit


def mode_of(shared: bool, limit: Optional[int]) -> Mode:
    """The mode an acquire asks for: ``limit`` makes a semaphore (shared implied)."""
    if limit is not None:
        return "semaphore"
    return "shared" if shared else "exclusive"


def acquire_args(
    key: Key,
    ttl_ms: int,
    token: Token,
    block: Optional[int],
    *,
    shared: bool = False,
    limit: Optional[int] = None,
    session: Optional[Token] = None,
    lock_delay_ms: Optional[int] = None,
    value: Optional[Value] = None,
) -> Args:
    """``LIMIT n`` implies ``SHARED``, so only one of them is sent. ``session`` makes
    the holding one of that session's; ``lock_delay_ms`` (None: the server's
    ``fencelock.lock-delay``) how long the key stays quarantined if its lease runs
    out; ``value`` the public value an exclusive holding carries (``VALUE``: an
    election's leader proclaims itself with it)."""
    args: Args = (ACQUIRE, key, ttl_ms, "TOKEN", token)
    if session is not None:
        args += ("SESSION", session)
    if block is not None:
        args += ("BLOCK", block)
    if limit is not None:
        args += ("LIMIT", limit)
    elif shared:
        args += ("SHARED",)
    if lock_delay_ms is not None:
        args += ("LOCKDELAY", lock_delay_ms)
    if value is not None:
        args += ("VALUE", value)
    return args


def acquire_all_args(
    keys: tuple[Key, ...],
    ttl_ms: int,
    token: Token,
    block: Optional[int],
    *,
    shared: bool = False,
    limit: Optional[int] = None,
    session: Optional[Token] = None,
    lock_delay_ms: Optional[int] = None,
) -> Args:
    """``LOCK.ACQUIREALL numkeys key [key ...] ttl-ms TOKEN token ...``: every key or
    none, one token for all, the options as for ``acquire_args``."""
    args: Args = (ACQUIREALL, len(keys), *keys, ttl_ms, "TOKEN", token)
    if session is not None:
        args += ("SESSION", session)
    if block is not None:
        args += ("BLOCK", block)
    if limit is not None:
        args += ("LIMIT", limit)
    elif shared:
        args += ("SHARED",)
    if lock_delay_ms is not None:
        args += ("LOCKDELAY", lock_delay_ms)
    return args


def check_keys(keys: Any) -> tuple[Key, ...]:
    """The keys of a ``LOCK.ACQUIREALL`` as a tuple, in the order given: at least one,
    none twice (as the server stores them: ``"a"`` and ``b"a"`` are one key). A single
    ``str`` or ``bytes`` is refused rather than taken for its characters."""
    if isinstance(keys, (str, bytes, memoryview)):
        raise TypeError("the keys must be a list of names, not one name")
    checked = tuple(keys)
    if not checked:
        raise ValueError("at least one key is needed")
    seen: set[bytes] = set()
    for key in checked:
        raw = as_bytes(key)
        if raw in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen.add(raw)
    return checked


def keepalive_args(session: Token, ttl_ms: int) -> Args:
    return (KEEPALIVE, session, ttl_ms)


def close_args(session: Token) -> Args:
    return (CLOSE, session)


def held_args(session: Token) -> Args:
    return (HELD, session)


def as_bytes(value: Any) -> bytes:
    """A key or a name as the server stores it (for comparing replies with what was
    sent, whatever the client's ``decode_responses``)."""
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def parse_held(reply: Any) -> set[tuple[bytes, int]]:
    """``LOCK.HELD``'s ``[[key, mode, fence, pttl], ...]`` as the set of (key, fence)
    the session holds: a fence names one holding of its key."""
    return {(as_bytes(entry[0]), int(entry[2])) for entry in reply or []}


def proclaim_args(key: Key, token: Token, value: Value) -> Args:
    return (PROCLAIM, key, token, value)


def observe_args(
    key: Key, known: Optional[tuple[int, Any]], block: Optional[int]
) -> Args:
    """``LOCK.OBSERVE key [fence value] [BLOCK ms]``: with ``known`` (the state last
    seen, ``(fence, value)``; the free state is ``(0, "")``) it answers as soon as the
    state differs from it; without, at once. ``block`` as ``block_ms`` gives it."""
    args: Args = (OBSERVE, key)
    if known is not None:
        fence, value = known
        args += (fence, b"" if value is None else value)
    if block is not None:
        args += ("BLOCK", block)
    return args


def parse_observed(reply: Any) -> Optional[tuple[int, Any]]:
    """``LOCK.OBSERVE``'s ``[fence, value]`` as a pair (``value`` None: nobody holds
    it exclusively — free, quarantined, or held shared with its highest fence); None
    when a wait ended with no change."""
    if reply is None:
        return None
    fence, value = reply
    return int(fence), value


def refresh_args(key: Key, token: Token, ttl_ms: int, *, add: bool = False) -> Args:
    """``ADD`` extends the lease from its current end instead of from now."""
    args: Args = (REFRESH, key, token, ttl_ms)
    return (*args, "ADD") if add else args


def release_args(key: Key, token: Token) -> Args:
    return (RELEASE, key, token)


def fence_args(key: Key, token: Optional[Token] = None) -> Args:
    return (FENCE, key) if token is None else (FENCE, key, token)


def info_args(key: Key) -> Args:
    return (INFO, key)


def guard_args(key: Key, token: Token, command: Args) -> Args:
    return (GUARD, key, token, *_inner(command))


def fenced_args(mark: Key, fence: int, command: Args) -> Args:
    return (FENCED, mark, fence, *_inner(command))


def _inner(command: Args) -> Args:
    # Caught here: without a command the cluster client would fail to route the call
    # with a confusing message before the server could answer its arity error.
    if not command:
        raise TypeError("a guarded or fenced call needs a command to run")
    return command


def wait_args(replicas: int, timeout: float) -> Args:
    return ("WAIT", replicas, to_ms(timeout))


def persist_args(key: Key, token: Token) -> Args:
    return ("EVAL", PERSIST_IF_HELD, 1, key, token)


def persist_all_args(keys: tuple[Key, ...], token: Token) -> Args:
    return ("EVAL", PERSIST_ALL_IF_HELD, len(keys), *keys, token)


def parse_grant(reply: Any) -> Optional[int]:
    """The fence of a grant (``[token, fence]``), or None when the lock was busy."""
    if reply is None:
        return None
    _, fence = reply
    return int(fence)


def parse_grant_all(reply: Any) -> Optional[list[int]]:
    """The fences of a ``LOCK.ACQUIREALL`` grant (``[token, [fence, ...]]``, in the
    order of the keys), or None when it was not granted."""
    if reply is None:
        return None
    _, fences = reply
    return [int(fence) for fence in fences]


def parse_flag(reply: Any) -> bool:
    """REFRESH and RELEASE answer 1 when the token held the lock, else 0."""
    return reply is not None and int(reply) == 1


def is_wrongtype(error: ResponseError) -> bool:
    """A key of another type: redis-py's lock reads that as busy / not owned."""
    return str(error).startswith("WRONGTYPE")


def is_wrongsession(error: ResponseError) -> bool:
    """An acquire whose token already holds the key in another session (or outside
    any, or in one when asked without): refused, nothing changed."""
    return str(error).split(" ", 1)[0] == "WRONGSESSION"


def is_notheld(error: ResponseError) -> bool:
    """``LOCK.GUARD`` refused: the token does not hold the lock, nothing ran."""
    return str(error).startswith(NOTHELD)


def wrong_mode(
    error: ResponseError,
) -> Optional[tuple[Optional[Mode], Optional[int]]]:
    """From a ``WRONGMODE`` refusal (nothing changed on the server): the mode the key,
    or the token's own holding, is in, and the semaphore's limit; None for any other
    error. A wording this client does not know gives ``(None, None)``."""
    text = str(error)
    if text.split(" ", 1)[0] != "WRONGMODE":
        return None
    match = WRONGMODE.match(text)
    if match is None:
        return None, None
    if match.group("limit") is not None:
        return "semaphore", int(match.group("limit"))
    return ("shared" if match.group("held") == "shared" else "exclusive"), None


def deadlock(error: ResponseError) -> Optional[tuple[str, str]]:
    """From a ``DEADLOCK`` refusal (nothing changed, nothing queued): the key of the
    request through which the cycle runs and the key held by the requester's own owner
    where it closes; None for any other error. A wording this client does not know
    gives two empty strings."""
    text = str(error)
    if text.split(" ", 1)[0] != "DEADLOCK":
        return None
    match = DEADLOCK.match(text)
    if match is None:
        return "", ""
    return match.group("key"), match.group("held")


def named_key(error: ResponseError, keys: tuple[Key, ...]) -> Key:
    """The key of ``keys`` that a refusal of a ``LOCK.ACQUIREALL`` names (WRONGMODE,
    WRONGSESSION and DEADLOCK each name the key that refused), as it was given; the
    first key when the message names none of them."""
    text = str(error)
    for key in keys:
        name = as_bytes(key).decode(errors="replace")
        if (
            text.startswith(f"WRONGMODE {name} is ")
            or f" holds {name} in another session" in text
            or text.startswith(f"DEADLOCK waiting for {name} would wait for ")
        ):
            return key
    return keys[0]


def stale_highest(error: ResponseError) -> Optional[int]:
    """The mark's highest fence from a ``LOCK.FENCED`` refusal; None for any other
    error (the inner command's own errors pass through unchanged)."""
    match = STALE.match(str(error))
    return int(match.group(1)) if match else None
