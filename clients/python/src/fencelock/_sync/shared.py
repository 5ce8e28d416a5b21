# Generated from fencelock/_async/shared.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Locks with more than one holder: ``Semaphore`` (at most ``limit`` holders,
``LOCK.ACQUIRE … LIMIT n``) and ``ReadWriteLock`` (any number of readers, ``SHARED``,
or one writer); on ``fencelock`` with ``with`` and awaited methods.

    permits = fencelock.Semaphore(r, "payment-api", limit=5, timeout=30)
    with permits:
        call_the_api(fence=permits.fence)

    config = fencelock.ReadWriteLock(r, "config", timeout=30, blocking_timeout=5)
    with config.read():
        read_config()
    with config.write():
        write_config()

Both are ``fencelock.Lock`` underneath (same methods, return values and exceptions as
redis-py's lock): each holder has its own token, lease and fence, and waits in the
server's FIFO queue, where a reader never overtakes a queued writer. Every holder needs
a ``timeout``: its lease ends on its own, so a permit of a client that died comes back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from redis.exceptions import ResponseError

from .. import _lockstate as state
from .._protocol import Key, check_limit, is_wrongtype
from ..info import no_permit_free
from ._compat import check_client
from .info import lock_info
from .lock import Lock
from .surface import Number

if TYPE_CHECKING:
    from .._types import SyncClient


class Semaphore(Lock):
    """A distributed semaphore of ``limit`` permits at ``name``; each ``acquire`` takes
    one for this thread (``thread_local=False``: for the object), ``release`` gives it
    back. Arguments as ``fencelock.Lock``, with ``limit`` after the name and a required
    ``timeout`` (the lease of each permit, in seconds).

    Every holder must use the same ``limit``: an acquire with another one than the
    current holders' raises ``WrongMode`` (the limit belongs to the key while it has
    holders). ``extend``, ``reacquire``, ``owned``, ``guard`` and ``fence`` are the
    holder's own; ``locked()`` says whether no permit is free now."""

    def __init__(
        self,
        redis: SyncClient,
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

    def locked(self) -> bool:
        """True if an acquire would have to wait now: every permit is held (or the key
        is held in another mode, or by a value of another type), or others already
        wait for one. Like ``asyncio.Semaphore.locked``."""
        assert self.limit is not None
        try:
            info = lock_info(self.redis, self.name)
        except ResponseError as error:
            if is_wrongtype(error):
                return True
            raise
        return no_permit_free(info, self.limit)


class ReadWriteLock:
    """A distributed read-write lock at ``name``: ``read()`` is its shared lock (any
    number of readers together), ``write()`` its exclusive one (one writer, no
    readers). Each is a ``fencelock.Lock`` made with these arguments (``timeout``, the
    lease of each holder in seconds, is required), the same object on every call, so
    ``rw.read().fence`` is the fence of this thread's read lock.

    Waiting is FIFO across both: a reader that arrives while a writer waits queues
    behind it (writers do not starve), and the readers queued behind a writer are all
    granted together when it leaves. There is no upgrade: a token that holds the read
    lock and asks for the write lock gets ``WrongMode`` (at once when this thread or
    task holds ``read()`` of the same object: the server cannot tell that the writer
    would wait for itself)."""

    def __init__(
        self,
        redis: SyncClient,
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
        check_client(redis, "ReadWriteLock")
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
                per_task=True,
            )
            for shared in (True, False)
        )
        self._write.other_side, self._read.other_side = self._read, self._write

    def read(self) -> Lock:
        """The shared lock: ``with rw.read(): ...``."""
        return self._read

    def write(self) -> Lock:
        """The exclusive lock: ``with rw.write(): ...``."""
        return self._write

    def locked(self) -> bool:
        """True if anyone holds the lock, reader or writer (as ``Lock.locked``)."""
        return bool(self.redis.exists(self.name))
