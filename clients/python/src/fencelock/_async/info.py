"""``LOCK.INFO`` as a dict (``fencelock.info`` has the type and the parsing)."""

from __future__ import annotations

from typing import Any, Optional

from .._protocol import Key, info_args
from ..info import LockInfo, parse_info
from ._commands import call
from ._compat import check_client


async def lock_info(client: Any, key: Key) -> Optional[LockInfo]:
    """The state of the lock at ``key`` (the full key: no prefix is added)."""
    check_client(client, "lock_info")
    return parse_info(await call(client, key, *info_args(key)))
