"""A gevent program for tests/test_gevent_fork.py: what gunicorn ``--preload
--worker-class gevent`` does. The parent uses the lock manager (a start-up step under
a lock), forks, and the child monkey-patches (``gevent.monkey.patch_all()``) before it
takes a lock of its own, with a session (the default) or without. The child prints
``held <fence>`` from inside its block and ``left`` after it, or the error and the
lock's ``LOCK.INFO`` after it; the parent prints the lock's ``LOCK.INFO`` once the
child has exited (None: nothing left held).

    python gevent_fork.py <redis url> <session: 1 or 0>"""

from __future__ import annotations

import os
import sys

import redis

import fencelock


def child(locks: fencelock.Locks, name: str, session: bool) -> None:
    from gevent import monkey

    monkey.patch_all()
    try:
        with locks.lock(name, ttl=2, session=session) as lease:
            print("held", lease.fence, flush=True)
        print("left", flush=True)
    except BaseException as error:
        print("error", type(error).__name__, error, flush=True)
        print("info after the error", locks.info(name), flush=True)


def main() -> None:
    url, session = sys.argv[1], sys.argv[2] == "1"
    locks = fencelock.Locks(redis.Redis.from_url(url))
    with locks.lock("gevent-fork-startup", ttl=2, session=session):
        pass
    name = f"gevent-fork-{os.getpid()}"
    pid = os.fork()
    if pid == 0:
        try:
            child(locks, name, session)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    print("info", locks.info(name), flush=True)


if __name__ == "__main__":
    main()
