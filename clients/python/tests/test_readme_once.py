"""The README's Run once example, run as a reader would paste it (only the server URL
changed to the test server's): the decorated charge runs once and its duplicate gets
the stored result; the ``once_result`` block runs and stores its result."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import redis
from servers import Server

README = Path(__file__).resolve().parents[1] / "README.md"
README_URL = "redis://localhost:6379/0"


def once_example() -> str:
    text = README.read_text()
    section = text[text.index("\n## Run once\n") :]
    section = section[: section.index("\n## ", 1)]
    block = re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    assert block, "the Run once section has a python block"
    assert README_URL in block.group(1)
    return block.group(1)


def test_the_readme_run_once_example(
    server: Server, r: redis.Redis, tmp_path: Path
) -> None:
    script = tmp_path / "once.py"
    script.write_text(once_example().replace(README_URL, server.url))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("{'refund': 'r-1', 'fence': ")
    assert done.stdout.rstrip().endswith("} False")
    stored = r.execute_command("LOCK.ONCE", "lock:charge:o-17", 1000, "KEEP", 1000)
    assert json.loads(stored[2]) == {"order": "o-17", "status": "paid", "cents": 1999}
