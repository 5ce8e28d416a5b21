"""A server without the module: every way to take a lock (the drop-in lock and the
manager, not waiting, waiting, waiting forever; a plain client, one from a URL, one
behind a Sentinel) raises ``ModuleNotLoaded`` at once, a ``LockError`` naming the
server and how to load the module, and never showing the token, not even in the
exception it was raised from."""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
import redis.asyncio
import redis.asyncio.sentinel
from redis.exceptions import LockError, ResponseError
from servers import module_path
from setups import Node, Sentinel, stopping

import fencelock.asyncio

from .helpers import drop_in

SECRET = "tok-7f3a9c-never-print-me"
SERVICE = "fencelock-master"

# The ways to try: the drop-in lock or the manager, not waiting, waiting, forever.
HOW = [
    "lock-no-wait",
    "lock-wait",
    "lock-forever",
    "locks-no-wait",
    "locks-wait",
    "locks-forever",
]


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = Node(tmp_path_factory.mktemp("bare"), module=False)
    with stopping(node):
        yield node


def shown(error: BaseException) -> str:
    """Everything of the error a log shows: str, repr, the formatted traceback."""
    return "\n".join(
        [
            str(error),
            repr(error),
            "".join(
                traceback.format_exception(type(error), error, error.__traceback__)
            ),
        ]
    )


def assert_module_not_loaded(error: BaseException, node: Node) -> None:
    assert isinstance(error, fencelock.asyncio.ModuleNotLoaded), shown(error)
    assert isinstance(error, LockError)
    text = str(error)
    assert node.address in text, text
    assert "loadmodule" in text and "libfencelock.so" in text, text
    assert "enable-module-command" in text, text
    assert SECRET not in shown(error), shown(error)


async def attempt(client: Any, how: str) -> None:
    """Takes the lock ``m`` the way ``how`` says, with the token ``SECRET``."""
    if how.startswith("locks"):
        locks = fencelock.asyncio.Locks(client)
        wait = {"locks-no-wait": 0, "locks-wait": 5, "locks-forever": None}[how]
        async with locks.lock("m", ttl=30, wait=wait, token=SECRET):
            pass
    else:
        kwargs: dict[str, Any] = {}
        if how == "lock-wait":
            kwargs["blocking_timeout"] = 5
        lock = drop_in(client, "m", timeout=30, **kwargs)
        await lock.acquire(blocking=how != "lock-no-wait", token=SECRET)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("construction", ["plain", "from_url"])
async def test_without_the_module_module_not_loaded(
    bare: Node, construction: str, how: str
) -> None:
    start = time.monotonic()
    if construction == "plain":
        client = redis.asyncio.Redis(host="127.0.0.1", port=bare.port)
    else:
        client = redis.asyncio.Redis.from_url(bare.url)
    with pytest.raises(LockError) as raised:
        await attempt(client, how)
    assert time.monotonic() - start < 2, "refused at once, not waited"
    assert_module_not_loaded(raised.value, bare)
    assert await client.dbsize() == 0
    await client.aclose()


async def test_module_not_loaded_says_how_to_load_the_module(bare: Node) -> None:
    """The usual way first (``loadmodule`` in redis.conf, ``--loadmodule``); ``MODULE
    LOAD`` only with ``enable-module-command``, since a server refuses it by default,
    as this one (started without that option) does."""
    client = redis.asyncio.Redis(host="127.0.0.1", port=bare.port)
    with pytest.raises(fencelock.asyncio.ModuleNotLoaded) as raised:
        await fencelock.asyncio.Locks(client).acquire("m", ttl=30)
    text = str(raised.value)
    assert "`loadmodule /path/to/fencelock.so`" in text, text
    assert "`--loadmodule /path/to/fencelock.so`" in text, text
    assert "enable-module-command yes" in text and "`local`" in text, text
    with pytest.raises(ResponseError) as refused:
        await client.execute_command("MODULE", "LOAD", module_path())
    assert "enable-module-command" in str(refused.value)
    modules = await client.execute_command("MODULE", "LIST")
    assert "fencelock" not in str(modules).lower()
    await client.aclose()


async def test_module_not_loaded_keeps_no_server_message(bare: Node) -> None:
    """The server's "unknown command" reply repeats the arguments, the token too: the
    error keeps none of it, not even as the exception it was raised from (a reporter
    that walks ``__context__`` would show it)."""
    client = redis.asyncio.Redis(host="127.0.0.1", port=bare.port)
    lock = drop_in(client, "m", timeout=30, blocking_timeout=5)
    with pytest.raises(fencelock.asyncio.ModuleNotLoaded) as raised:
        await lock.acquire(token=SECRET)
    chained: list[str] = []
    error: Optional[BaseException] = raised.value
    while error is not None:
        chained.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    await client.aclose()
    assert not any(SECRET in text for text in chained), chained


async def test_without_the_module_behind_a_sentinel(tmp_path: Path) -> None:
    """Through a Sentinel client: ``ModuleNotLoaded`` too, naming the service."""
    master = Node(tmp_path / "bare-master", module=False)
    sentinel = Sentinel(tmp_path / "bare-sentinel", master, SERVICE)
    with stopping(sentinel, master):
        sentinels = redis.asyncio.sentinel.Sentinel([("127.0.0.1", sentinel.port)])
        client = sentinels.master_for(SERVICE)
        try:
            for take in (
                lambda: drop_in(client, "m", timeout=30, blocking_timeout=5).acquire(
                    token=SECRET
                ),
                lambda: fencelock.asyncio.Locks(client).acquire(
                    "m", ttl=30, wait=5, token=SECRET
                ),
            ):
                with pytest.raises(fencelock.asyncio.ModuleNotLoaded) as raised:
                    await take()
                assert SERVICE in str(raised.value), str(raised.value)
                assert "loadmodule" in str(raised.value)
                assert SECRET not in shown(raised.value), shown(raised.value)
        finally:
            await client.aclose()
            for one in sentinels.sentinels:
                await one.aclose()
