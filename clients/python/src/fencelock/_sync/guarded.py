# Generated from fencelock/_async/guarded.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Guarded and fenced calls: a command that the server runs only while a token holds
a lock (``LOCK.GUARD``), or only with a fence at least a mark's highest
(``LOCK.FENCED``); awaited on ``fencelock``.

Both go through the client's ``execute_command`` like every other ``LOCK.*`` command,
so a cluster client routes them by their keys: the module declares the lock key (or
mark) and the inner command's keys, which must share a slot (hash-tag them,
``lock:{sku}`` and ``{sku}:stock``). The reply is the inner command's, as the server
sent it: redis-py's parsing for that command (``SET`` -> True) is not applied."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from .._protocol import Key, Token, fenced_args, guard_args, is_notheld, stale_highest
from ..errors import LockLost, StaleFence
from ._commands import call
from ._compat import check_client


def guard(client: Any, key: Key, token: Token, *command: Any) -> Any:
    """Runs ``command`` only if ``token`` holds the lock ``key`` now, checked and run in
    one step on the server; returns its reply. ``LockLost`` if not: nothing ran."""
    try:
        return call(client, key, *guard_args(key, token, command))
    except ResponseError as error:
        if is_notheld(error):
            raise LockLost(key) from None
        raise


def fenced(client: Any, mark: Key, fence: int, *command: Any) -> Any:
    """Runs ``command`` only if ``fence`` is at least the highest that ``mark`` has
    admitted (the mark then holds ``fence``); returns its reply. ``StaleFence`` if it
    is below: a newer holder has written, nothing ran.

    For a read-modify-write, read *through* it too (``fenced(r, mark, fence, "GET",
    key)``): the read then raises the mark, so a holder whose lease lapsed after it
    read is refused even if the newer holder has not written yet."""
    check_client(client, "fenced")
    try:
        return call(client, mark, *fenced_args(mark, fence, command))
    except ResponseError as error:
        highest = stale_highest(error)
        if highest is None:
            raise
        raise StaleFence(mark, fence, highest) from None
