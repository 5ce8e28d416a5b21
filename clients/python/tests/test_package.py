"""The package as published: its version is the module crate's, it ships ``py.typed``,
and its public names are where the README says. Neither side's (no server, no
client), so written once by hand."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import redis.exceptions

import fencelock
import fencelock.asyncio

ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT.parents[1]


def _version_in(path: Path) -> str:
    match = re.search(r'^version = "([^"]+)"', path.read_text(), re.MULTILINE)
    assert match, f"no version in {path}"
    return match.group(1)


def test_the_version_is_the_crates() -> None:
    crate = _version_in(REPO / "Cargo.toml")
    assert fencelock.__version__ == crate
    assert _version_in(ROOT / "pyproject.toml") == crate


def test_it_is_typed() -> None:
    assert (Path(fencelock.__file__).parent / "py.typed").is_file()


def test_public_names() -> None:
    for module in (fencelock, fencelock.asyncio):
        for name in module.__all__:
            assert getattr(module, name) is not None, name
    assert fencelock.LockError is redis.exceptions.LockError
    assert issubclass(fencelock.LockNotAcquired, redis.exceptions.LockError)
    assert fencelock.asyncio.LockNotAcquired is fencelock.LockNotAcquired
    # Guards refused by the server are "not owned" to redis-py's handlers too.
    assert issubclass(fencelock.LockLost, redis.exceptions.LockNotOwnedError)
    assert issubclass(fencelock.StaleFence, redis.exceptions.LockError)
    assert fencelock.asyncio.StaleFence is fencelock.StaleFence
    # A refused mode is a lock error and the server's error reply it is.
    assert issubclass(fencelock.WrongMode, redis.exceptions.LockError)
    assert issubclass(fencelock.WrongMode, redis.exceptions.ResponseError)
    assert fencelock.asyncio.WrongMode is fencelock.WrongMode
    # A refused wait (a deadlock) too; and one class on both sides.
    assert issubclass(fencelock.Deadlock, redis.exceptions.LockError)
    assert issubclass(fencelock.Deadlock, redis.exceptions.ResponseError)
    assert fencelock.asyncio.Deadlock is fencelock.Deadlock
    # What Locks.lock_all returns is a MultiLock.
    assert issubclass(fencelock.ManagedMultiLock, fencelock.MultiLock)
    assert issubclass(fencelock.asyncio.ManagedMultiLock, fencelock.asyncio.MultiLock)
    # Semaphores and read-write locks are the package's locks underneath.
    assert issubclass(fencelock.Semaphore, fencelock.Lock)
    assert issubclass(fencelock.asyncio.Semaphore, fencelock.asyncio.Lock)


def test_supported_python() -> None:
    assert sys.version_info >= (3, 9)


def test_sync_and_asyncio_offer_the_same_names() -> None:
    """The sync modules are generated from the asyncio ones: the same classes with
    the same public methods, awaited on one side (asyncio's ``aclose`` is the sync
    ``close``, as in redis-py; ``close`` is its alias there)."""
    assert set(fencelock.asyncio.__all__) <= set(fencelock.__all__)
    for name in (
        "Lock",
        "Locks",
        "Lease",
        "Semaphore",
        "ReadWriteLock",
        "MultiLock",
        "ManagedMultiLock",
    ):
        sync_names = {n for n in dir(getattr(fencelock, name)) if not n.startswith("_")}
        async_names = {
            "close" if n == "aclose" else n
            for n in dir(getattr(fencelock.asyncio, name))
            if not n.startswith("_")
        }
        assert sync_names == async_names, name
    assert fencelock.asyncio.Locks.close is fencelock.asyncio.Locks.aclose
