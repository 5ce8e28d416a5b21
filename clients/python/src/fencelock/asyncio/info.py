"""``LOCK.INFO`` as a dict for asyncio clients (``fencelock.lock_info`` is the sync
call)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .._protocol import Key, info_args
from ..info import LockInfo, parse_info

if TYPE_CHECKING:
    from .._types import AsyncClient


async def lock_info(client: AsyncClient, key: Key) -> Optional[LockInfo]:
    """The state of the lock at ``key`` (the full key: no prefix is added)."""
    return parse_info(await client.execute_command(*info_args(key)))
