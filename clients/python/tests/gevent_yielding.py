"""A gevent program for tests/test_gevent_yield.py, the guide's recipe for long
computing under gevent (clients/python/README.md, "Processes and fork"): work in
stretches, each well under the ttl, with ``gevent.sleep(<seconds>)`` between them.
Prints ``held`` or ``lost <reason>``.

    python gevent_yielding.py <redis url> <ttl> <stretches> <seconds each> <pause>"""

from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import redis  # noqa: E402

import fencelock  # noqa: E402


def crunch(seconds: float) -> None:
    """Busy, never yielding to another greenlet."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


def main() -> None:
    url, ttl = sys.argv[1], float(sys.argv[2])
    stretches, seconds, pause = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    locks = fencelock.Locks(redis.Redis.from_url(url))
    try:
        with locks.lock("gevent-yielding", ttl=ttl):
            for _ in range(stretches):
                crunch(seconds)
                gevent.sleep(pause)  # the recipe: a pause above 0
    except fencelock.LockLost as lost:
        print("lost", lost.reason)
    else:
        print("held")


if __name__ == "__main__":
    main()
