"""OpenTelemetry stays optional and costs nothing unused: ``import fencelock`` (and
``fencelock.asyncio``) imports none of it, and without it installed locks are taken,
held and released with nothing imported and nothing recorded. Each check runs in a
fresh interpreter. (redis-py 8 imports OpenTelemetry itself when it is installed, for
its own metrics: what counts is what fencelock adds to what ``import redis`` loaded.)
(What is recorded with it is tests/_async/test_telemetry.py.)"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from servers import Server

# Hides an installed OpenTelemetry as if it were not installed: a None in
# ``sys.modules`` makes both ``import`` and ``importlib.util.find_spec`` find nothing.
WITHOUT = "import sys; sys.modules['opentelemetry'] = None\n"

# Run first: what redis-py loads by itself, before fencelock is imported.
BEFORE = (
    "import sys, redis, redis.asyncio, redis.cluster, redis.asyncio.cluster\n"
    "before = set(sys.modules)\n"
)
# What fencelock loaded of OpenTelemetry beyond that.
LOADED = (
    "added = sorted(m for m in set(sys.modules) - before"
    " if m.startswith('opentelemetry'))\n"
    "print(added)\n"
)


def run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_importing_fencelock_imports_no_opentelemetry() -> None:
    out = run(
        BEFORE
        + "import fencelock, fencelock.asyncio, fencelock._telemetry as t\n"
        + "print(t.INSTALLED)\n"
        + LOADED
    )
    # It is installed here (the tests need the SDK), yet nothing of it is imported.
    assert out.splitlines() == ["True", "[]"]


def test_without_opentelemetry_locks_work_and_import_nothing(server: Server) -> None:
    out = run(
        WITHOUT
        + BEFORE
        + f"""
import asyncio, fencelock, fencelock.asyncio
import fencelock._telemetry as t
print(t.INSTALLED)
r = redis.Redis.from_url({server.url!r})
with fencelock.Locks(r, session=False).lock("plain", ttl=5) as lease:
    assert lease.holding is t.NOTHING
lock = r.lock("plain-dropin", timeout=5, lock_class=fencelock.Lock)
assert lock.acquire() and lock.fence
lock.release()

async def main():
    client = redis.asyncio.Redis.from_url({server.url!r})
    async with fencelock.asyncio.Locks(client).lock("plain-async", ttl=5):
        pass
    await client.aclose()

asyncio.run(main())
"""
        + LOADED
    )
    assert out.splitlines() == ["False", "[]"]


def test_with_opentelemetry_it_is_set_up_at_the_first_acquire(
    server: Server,
) -> None:
    out = run(
        "import sys, redis, fencelock, fencelock._telemetry as t\n"
        + "print(t._otel is None)\n"
        + f"r = redis.Redis.from_url({server.url!r})\n"
        + "fencelock.Locks(r, session=False).acquire('first', ttl=5)\n"
        + "print(t._otel is None, 'opentelemetry.trace' in sys.modules)\n"
    )
    assert out.splitlines() == ["True", "False True"]
