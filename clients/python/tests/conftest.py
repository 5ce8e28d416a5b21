"""Fixtures: one server with the module for the whole session (flushed before each
test), sync and asyncio clients on it, and servers of their own for the tests that
need a replica, a proxy or a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
from servers import Server, start_cluster

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs an asyncio test body on a fresh event loop (no plugin needed)."""
    return asyncio.run(coroutine)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = Server(tmp_path_factory.mktemp("server"))
    yield started
    started.stop()


@pytest.fixture
def r(server: Server) -> Iterator[redis.Redis]:
    client = server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def any_r(server: Server, request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A client with and without ``decode_responses``."""
    client = server.client(decode_responses=request.param)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def url(server: Server, r: redis.Redis) -> str:
    """The server's URL, flushed, for asyncio tests that make their own clients."""
    return server.url


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    nodes = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield nodes
    for node in nodes:
        node.stop()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Server]:
    """A server for one test, for tests that change its configuration."""
    started = Server(tmp_path / "own")
    yield started
    started.stop()


def async_client(url: str, **kwargs: Any) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(url, **kwargs)
