"""The README's "Many locks at once" example, run as a reader would paste it (only the
server URL changed to the test server's): three locks in one ``LOCK.ACQUIREALL``,
the drop-in ``MultiLock``, and the deadlock between two managers refused at once.
Written by hand: the README's text is what runs, as it is."""

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


def multi_example() -> str:
    text = README.read_text()
    section = text[text.index("\n## Many locks at once\n") :]
    section = section[: section.index("\n## ", 1)]
    block = re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    assert block, "the section has a python block"
    assert README_URL in block.group(1)
    return block.group(1)


def test_the_readme_many_locks_example(
    server: Server, r: redis.Redis, tmp_path: Path
) -> None:
    script = tmp_path / "many.py"
    script.write_text(multi_example().replace(README_URL, server.url))
    monitor = Monitor(server.port)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    lines = monitor.stop()
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "the example as pasted warns of nothing"
    assert done.stdout.splitlines() == [
        "order:17 has fence True",
        "customer:4 has fence True",
        "stock:9 has fence True",
        "invoices held: True",
        "refused at once: lock:a would wait for lock:b",
    ]
    assert monitor.count(lines, "lock.acquireall") == 3
    assert r.keys("*") == [], "nothing is left held"
