"""The runner of tests/_async/test_once.py's crash test, a process of its own: claims
the run of ``NAME`` and, granted, prints its fence and works for ever (until the test
kills it with SIGKILL, mid-run, before it stored anything).

    python once_runner.py URL NAME TTL
"""

from __future__ import annotations

import sys
import time

import redis

import fencelock


def main() -> None:
    url, name, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
    locks = fencelock.Locks(redis.Redis.from_url(url))
    with locks.once_result(name, ttl, keep=60, wait=0) as once:
        print("running" if once.lease is not None else "replayed", once.fence)
        sys.stdout.flush()
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
