"""The drop-in locks (``Lock``, ``MultiLock``) against a server that went away: every
call raises a redis-py ``LockError`` (the guide: ``except LockError`` catches them
all), ``ServerUnavailable``, which is also the redis-py ``ConnectionError`` that code
written for redis-py's lock catches; never a bare ``ConnectionError``. The client is
``from_url`` (no retries): each call fails at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest
import redis.asyncio
import redis.exceptions
from redis.exceptions import LockError
from servers import Server

import fencelock.asyncio

from .helpers import drop_in

CALLS = [
    "acquire",
    "release",
    "do_release",
    "extend",
    "do_extend",
    "reacquire",
    "do_reacquire",
    "locked",
    "owned",
    "with",
]


@pytest.fixture
def gone(tmp_path: Path) -> Iterator[Server]:
    """A server for one test, killed by the test."""
    started = Server(tmp_path / "gone")
    yield started
    started.stop()


def call(lock: Any, what: str) -> Callable[[], Any]:
    """The call ``what`` of ``lock``; skipped where the class has no such method
    (``MultiLock`` has no ``do_extend``, ``do_reacquire``, as ``redis-py`` has none)."""
    if not hasattr(lock, what):
        pytest.skip(f"{type(lock).__name__} has no {what}")
    token = lock.local.token
    method = getattr(lock, what)
    arguments: dict[str, tuple[Any, ...]] = {
        "do_release": (token,),
        "extend": (1,),
        "do_extend": (1, False),
    }
    if what == "acquire":
        return lambda: method(blocking=False)
    return lambda: method(*arguments.get(what, ()))


def make(kind: str, client: Any, name: str) -> Any:
    if kind == "lock":
        return drop_in(client, name, timeout=30)
    return fencelock.asyncio.MultiLock(client, [name, name + "-2"], timeout=30)


def check(error: BaseException) -> None:
    assert isinstance(error, fencelock.asyncio.ServerUnavailable), repr(error)
    assert isinstance(error, LockError)
    assert isinstance(error, redis.exceptions.ConnectionError)


@pytest.mark.parametrize("what", CALLS)
@pytest.mark.parametrize("kind", ["lock", "multi"])
async def test_a_drop_in_call_to_a_server_gone_raises_a_lock_error(
    gone: Server, kind: str, what: str
) -> None:
    client = redis.asyncio.Redis.from_url(gone.url)
    lock = make(kind, client, "gone")
    held = make(kind, client, "gone-block")
    assert await lock.acquire() and await held.acquire()
    gone.stop()
    with pytest.raises(Exception) as raised:
        if what == "with":
            async with held:  # its acquire fails first: the block's release is below
                pass
        else:
            await call(lock, what)()
    check(raised.value)
    if what == "release":
        assert lock.local.token is not None, "kept, so the release can be retried"
    await client.aclose()


@pytest.mark.parametrize("kind", ["lock", "multi"])
async def test_leaving_a_drop_in_block_whose_server_went_away_raises_a_lock_error(
    gone: Server, kind: str
) -> None:
    client = redis.asyncio.Redis.from_url(gone.url)
    with pytest.raises(Exception) as raised:
        async with make(kind, client, "block"):
            gone.stop()
    check(raised.value)
    await client.aclose()
