"""The guide's recipe for computing longer than the ttl under gevent: stretches well
under the ttl with ``gevent.sleep(0.001)`` between them keep the lock, held three
times its ttl (tests/gevent_yielding.py). ``gevent.sleep(0)`` would not: it runs the
greenlets that are ready, and gevent runs up to 50 of those before its loop looks at
timers again, so the refresher, waiting for its timer, is not run. Written by hand,
not generated from tests/_async: gevent is the sync side's."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from servers import Server

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gevent") is None,
    reason="gevent is not installed here (scripts/compat-requirements.txt pins it in"
    " target/venv)",
)


def test_computing_in_stretches_with_a_short_sleep_keeps_the_lock(
    server: Server, r: redis.Redis
) -> None:
    # ttl 3 s; 45 stretches of 0.1 s (4.5 s: the lease must be refreshed), each
    # followed by gevent.sleep(0.001). A 3 s lease leaves a refresh (due after 1 s)
    # 2 s to arrive, which a loaded machine needs: with a 1 s lease, a run at a load
    # of 11 on 2 cores lost the lock while the program kept to the recipe.
    script = str(HERE / "gevent_yielding.py")
    done = subprocess.run(
        [sys.executable, script, server.url, "3", "45", "0.1", "0.001"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "held"
