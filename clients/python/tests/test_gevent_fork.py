"""gunicorn ``--preload --worker-class gevent`` and Celery's gevent pool fork first and
monkey-patch in the child: a lock manager used by the parent before the fork must
work in the patched child (its refresher's lock and condition made anew there, of
the patched kind), and leave nothing held behind it (tests/gevent_fork.py). Written
by hand, not generated from tests/_async: gevent is the sync side's."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from servers import Server

HERE = Path(__file__).resolve().parent

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the platform has no os.fork()"),
    pytest.mark.skipif(
        importlib.util.find_spec("gevent") is None,
        reason="gevent is not installed here (scripts/compat-requirements.txt pins it"
        " in target/venv)",
    ),
]


@pytest.mark.parametrize("session", [True, False], ids=["session", "own-lease"])
def test_a_manager_used_before_the_fork_locks_in_a_child_patched_after_it(
    server: Server, r: redis.Redis, session: bool
) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "gevent_fork.py"), server.url, str(int(session))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["held", "left", "info"], lines
    assert lines[-1] == "info None", lines
