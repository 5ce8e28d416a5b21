"""Fixtures and the runner of the asyncio tests: ``r`` and ``any_r`` are
``redis.asyncio`` clients on the session's server (flushed before each test), and an
``async def test_…`` runs on a fresh event loop (no plugin needed), which closes the
clients it was given before it ends. A coroutine left unawaited fails the test: an
``assert lock.acquire()`` without ``await`` would otherwise pass whatever happened.

Written by hand on each side (``tests/_sync/conftest.py`` is the threads' twin)."""

from __future__ import annotations

import asyncio
import gc
import inspect
import warnings
from collections.abc import Iterator
from typing import Any, Optional

import pytest
import redis
import redis.asyncio
from servers import Server


def _client(server: Server, **kwargs: Any) -> redis.asyncio.Redis:
    with server.client() as flusher:
        flusher.flushall()
    return redis.asyncio.Redis.from_url(server.url, **kwargs)


@pytest.fixture
def r(server: Server) -> Iterator[redis.asyncio.Redis]:
    yield _client(server)


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def any_r(
    server: Server, request: pytest.FixtureRequest
) -> Iterator[redis.asyncio.Redis]:
    """A client with and without ``decode_responses``."""
    yield _client(server, decode_responses=request.param)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Optional[bool]:
    test = pyfuncitem.obj
    if not inspect.iscoroutinefunction(test):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    clients = [arg for arg in kwargs.values() if isinstance(arg, redis.asyncio.Redis)]

    async def main() -> None:
        try:
            await test(**kwargs)
        finally:
            for client in clients:
                await client.aclose()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        asyncio.run(main())
        gc.collect()
    unawaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert not unawaited, f"a coroutine was not awaited: {unawaited}"
    return True
