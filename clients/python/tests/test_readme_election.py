"""The README's leader election example, run as a reader would paste it (only the
server URL changed to the test server's): nobody leads, then it does, proclaims, and
resigns on leaving the block; ``observe`` skips the proclaimed state that came and
went before it was asked again. Written by hand: the README's text is what runs, as
it is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import redis
from servers import Server

README = Path(__file__).resolve().parents[1] / "README.md"
README_URL = "redis://localhost:6379/0"


def election_example() -> str:
    text = README.read_text()
    section = text[text.index("\n## Leader election\n") :]
    section = section[: section.index("\n## ", 1)]
    block = re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    assert block, "the Leader election section has a python block"
    assert README_URL in block.group(1)
    return block.group(1)


def test_the_readme_election_example(
    server: Server, r: redis.Redis, tmp_path: Path
) -> None:
    script = tmp_path / "election.py"
    script.write_text(election_example().replace(README_URL, server.url))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "leader: None"
    fence = re.fullmatch(
        r"leader: Leader\(value=b'host-1:8080', fence=(\d+)\)", lines[1]
    )
    assert fence, lines
    assert lines[2] == (
        f"proclaimed: Leader(value=b'host-1:8080 draining', fence={fence.group(1)})"
    )
    assert lines[3:] == ["leader: None"]
    assert r.lrange("runs", 0, -1) == [b"0", b"1", b"2"]
    assert r.exists("lock:scheduler") == 0
