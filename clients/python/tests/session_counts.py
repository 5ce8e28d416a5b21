"""What a server ran, read with a plain sync client beside the test's own: how many
times each session command ran (``INFO commandstats``), and what a session holds
(``LOCK.HELD``). Shared by tests/test_sessions.py and tests/test_asyncio_sessions.py."""

from __future__ import annotations

from typing import Any

import redis


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``)."""
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


class Counts:
    """The session commands and refreshes a server ran since this was made."""

    NAMES = ("lock.keepalive", "lock.refresh", "lock.held", "lock.close")

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.before = {name: calls(client, name) for name in self.NAMES}

    def __getitem__(self, name: str) -> int:
        return calls(self.client, name) - self.before[name]


def held_by(client: redis.Redis, session: str) -> list[Any]:
    return list(client.execute_command("LOCK.HELD", session))
