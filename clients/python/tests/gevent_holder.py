"""A gevent program for tests/test_process_models.py: threads monkey-patched into
greenlets, so the lock manager's refresher is a greenlet too. A block that computes
longer than the ttl without yielding starves it; the loss must still be reported
(``LockLost`` on leaving). Prints the outcome: ``lost <reason>`` or ``held``.

    python gevent_holder.py <redis url> <ttl> <seconds of computing>"""

from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402
import time  # noqa: E402

import redis  # noqa: E402

import fencelock  # noqa: E402


def compute(seconds: float) -> None:
    """Busy, never yielding to another greenlet."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


def main() -> None:
    url, ttl, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    locks = fencelock.Locks(redis.Redis.from_url(url))
    try:
        with locks.lock("gevent", ttl=ttl):
            compute(seconds)
    except fencelock.LockLost as lost:
        print("lost", lost.reason)
    else:
        print("held")


if __name__ == "__main__":
    main()
