"""``Semaphore`` and ``ReadWriteLock`` for ``redis.asyncio`` clients; behaviour as
``fencelock.shared`` (the sync ones), on ``fencelock.asyncio.Lock``.

    permits = Semaphore(r, "payment-api", limit=5, timeout=30)
    async with permits:
        await call_the_api(fence=permits.fence)

    config = ReadWriteLock(r, "config", timeout=30, blocking_timeout=5)
    async with config.read():
        await read_config()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from redis.exceptions import ResponseError

from .. import _lockstate as state
from .._protocol import Key, check_limit, is_wrongtype
from ..info import no_permit_free
from .info import lock_info
from .lock import Lock, Number

if TYPE_CHECKING:
    from .._types import AsyncClient


class Semaphore(Lock):
    """A distributed semaphore of ``limit`` permits; arguments and methods as
    ``fencelock.Semaphore``, awaited."""

    def __init__(
        self,
        redis: AsyncClient,
        name: Key,
        limit: int,
        timeout: Number,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        wait_replicas: int = 0,
        wait_replicas_timeout: Number = 1.0,
    ) -> None:
        checked = check_limit(limit)
        super().__init__(
            redis,
            name,
            timeout,
            sleep,
            blocking,
            blocking_timeout,
            thread_local,
            raise_on_release_error,
            wait_replicas=wait_replicas,
            wait_replicas_timeout=wait_replicas_timeout,
            shared=True,
        )
        self.limit = checked

    async def locked(self) -> bool:
        """True if an acquire would have to wait now: every permit is held (or the key
        is held in another mode, or by a value of another type), or others already
        wait for one. Like ``asyncio.Semaphore.locked``."""
        assert self.limit is not None
        try:
            info = await lock_info(self.redis, self.name)
        except ResponseError as error:
            if is_wrongtype(error):
                return True
            raise
        return no_permit_free(info, self.limit)


class ReadWriteLock:
    """A distributed read-write lock: ``read()`` the shared lock, ``write()`` the
    exclusive one, each a ``fencelock.asyncio.Lock`` (the same object on every call);
    arguments and behaviour as ``fencelock.ReadWriteLock``."""

    def __init__(
        self,
        redis: AsyncClient,
        name: Key,
        timeout: Number,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        wait_replicas: int = 0,
        wait_replicas_timeout: Number = 1.0,
    ) -> None:
        state.check_shared_timeout(timeout)
        self.redis = redis
        self.name = name
        self._read, self._write = (
            Lock(
                redis,
                name,
                timeout,
                sleep,
                blocking,
                blocking_timeout,
                thread_local,
                raise_on_release_error,
                wait_replicas=wait_replicas,
                wait_replicas_timeout=wait_replicas_timeout,
                shared=shared,
            )
            for shared in (True, False)
        )

    def read(self) -> Lock:
        """The shared lock: ``async with rw.read(): ...``."""
        return self._read

    def write(self) -> Lock:
        """The exclusive lock: ``async with rw.write(): ...``."""
        return self._write

    async def locked(self) -> bool:
        """True if anyone holds the lock, reader or writer."""
        return bool(await self.redis.exists(self.name))
