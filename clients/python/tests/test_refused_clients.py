"""Each side of the package refuses the other side's client at once, naming its twin:
a ``fencelock`` function given a ``redis.asyncio`` client would only make a coroutine,
and a ``fencelock.asyncio`` one cannot await a sync client's replies. One case per
side, written by hand: what they check is the difference between the sides."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio
from conftest import run

import fencelock
import fencelock.asyncio
from fencelock import fenced


def test_the_sync_functions_refuse_an_asyncio_client(r: redis.Redis, url: str) -> None:
    """``fencelock.fenced`` with a ``redis.asyncio`` client would only make a
    coroutine, whose ``STALE`` refusal would surface raw where it is awaited: refused
    at once with a TypeError that names the asyncio twin; nothing is sent."""
    r.execute_command("LOCK.FENCED", "mark:ledger", 50, "SET", "ledger", 1)

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        with pytest.raises(TypeError, match=r"use fencelock\.asyncio\.fenced "):
            fenced(client, "mark:ledger", 49, "SET", "ledger", 0)
        # The other side's client on purpose: typed Any, as a caller without a type
        # checker passes it.
        wrong: Any = client
        made = [
            ("lock_info", lambda: fencelock.lock_info(wrong, "k")),
            ("Lock", lambda: wrong.lock("k", timeout=5, lock_class=fencelock.Lock)),
            ("Locks", lambda: fencelock.Locks(wrong)),
            ("Semaphore", lambda: fencelock.Semaphore(wrong, "k", 2, timeout=5)),
            ("ReadWriteLock", lambda: fencelock.ReadWriteLock(wrong, "k", timeout=5)),
        ]
        for name, make in made:
            with pytest.raises(TypeError) as refused:
                make()
            assert f"use fencelock.asyncio.{name} " in str(refused.value), name
        await client.aclose()

    run(main())
    assert r.get("ledger") == b"1"


def test_the_asyncio_functions_refuse_a_sync_client(r: redis.Redis) -> None:
    """The reverse: a sync client's replies are not awaitable, so the asyncio side
    refuses it at once too, naming the sync twin."""
    with pytest.raises(TypeError, match=r"for a sync client use fencelock\.fenced$"):
        asyncio.run(fencelock.asyncio.fenced(r, "mark:ledger", 1, "SET", "ledger", 0))
    with pytest.raises(TypeError, match=r"use fencelock\.lock_info$"):
        asyncio.run(fencelock.asyncio.lock_info(r, "k"))
    wrong: Any = r  # the other side's client on purpose, as above
    for name, make in [
        ("Lock", lambda: wrong.lock("k", timeout=5, lock_class=fencelock.asyncio.Lock)),
        ("Locks", lambda: fencelock.asyncio.Locks(wrong)),
        ("Semaphore", lambda: fencelock.asyncio.Semaphore(wrong, "k", 2, timeout=5)),
    ]:
        with pytest.raises(TypeError) as refused:
            make()
        assert str(refused.value).endswith(f"use fencelock.{name}"), name
    assert r.get("ledger") is None
