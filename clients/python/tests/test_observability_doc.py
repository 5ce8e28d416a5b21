"""The observability guide's Lua script for redis_exporter's ``--script``
(docs/observability.md), run as the exporter runs it (``EVAL`` with no keys) against a
real server: name/value pairs whose values all parse as numbers (the exporter drops the
whole script's output otherwise), every numeric field of ``INFO fencelock`` among them,
and each percentile of the wait and hold lines as a field of its own."""

from __future__ import annotations

import re
from pathlib import Path

import redis

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "observability.md"


def script() -> str:
    found = re.search(r"```lua\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    assert found, "the guide has a Lua block"
    return found.group(1)


def test_the_exporter_script_returns_every_fencelock_field(r: redis.Redis) -> None:
    token, _ = r.execute_command("LOCK.ACQUIRE", "lock:a", 30000, "BLOCK", 100)
    r.execute_command("LOCK.RELEASE", "lock:a", token)
    reply = r.eval(script(), 0)
    names = [name.decode() for name in reply[::2]]
    values = [float(value) for value in reply[1::2]]
    exported = dict(zip(names, values))
    assert len(names) == len(exported), "each name once"
    info = r.info("fencelock")
    numeric = [name for name, value in info.items() if isinstance(value, int)]
    assert "fencelock_waits" in numeric and "fencelock_holds" in numeric
    for name in numeric:
        assert exported[name] == info[name], name
    for line in ("wait", "hold"):
        for percentile in ("p50", "p99", "p99_9"):
            assert f"fencelock_{line}_percentiles_usec_{percentile}" in exported
    assert exported["fencelock_waits"] >= 1 and exported["fencelock_holds"] >= 1
    assert all(name.startswith("fencelock_") for name in names)
