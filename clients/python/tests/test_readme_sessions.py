"""The README's Sessions example, run as a reader would paste it (only the server URL
changed to the test server's): it holds its 64 locks in one session, and leaving the
manager's ``with`` releases them with one ``LOCK.CLOSE``. Written by hand: the
README's text is what runs, as it is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import redis
from monitor import Monitor
from servers import Server

README = Path(__file__).resolve().parents[1] / "README.md"
README_URL = "redis://localhost:6379/0"


def sessions_example() -> str:
    text = README.read_text()
    section = text[text.index("\n## Sessions\n") :]
    section = section[: section.index("\n## ", 1)]
    block = re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    assert block, "the Sessions section has a python block"
    assert README_URL in block.group(1)
    return block.group(1)


def test_the_readme_sessions_example(
    server: Server, r: redis.Redis, tmp_path: Path
) -> None:
    script = tmp_path / "sessions.py"
    script.write_text(sessions_example().replace(README_URL, server.url))
    monitor = Monitor(server.port)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    lines = monitor.stop()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "holding 64 partitions"
    acquires = [line for line in lines if '"lock.acquire"' in line]
    assert len(acquires) == 64 and all('"session"' in line for line in acquires)
    assert len({line.split('"session" ')[1].split()[0] for line in acquires}) == 1
    assert monitor.count(lines, "lock.close") == 1
    assert monitor.count(lines, "lock.release") == 0
    assert r.exists(*(f"lock:partition:{p}" for p in range(64))) == 0
