"""The README's Python quick start, run as a newcomer would paste it: the first
``python`` block of README.md, with only the server URL changed to the test server's.
It must hold its lock and print the fence; run on three processes at once (the cron
job on three servers), the decorated job runs in one of them only."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import redis

README = Path(__file__).resolve().parents[3] / "README.md"
README_URL = "redis://localhost:6379/0"


def quick_start() -> str:
    block = re.search(
        r"^```python\n(.*?)^```", README.read_text(), re.DOTALL | re.MULTILINE
    )
    assert block, "README.md has a python block"
    code = block.group(1)
    assert README_URL in code, "the quick start connects to the server make run starts"
    assert len(code.splitlines()) <= 20, "the quick start stays short"
    return code


def test_the_readme_quick_start_runs_once_on_three_processes(server_url, tmp_path):
    script = tmp_path / "quick_start.py"
    script.write_text(quick_start().replace(README_URL, server_url))
    processes = [
        subprocess.Popen(
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for _ in range(3)
    ]
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        outputs.append(out)

    fences = [
        int(match.group(1))
        for out in outputs
        for match in re.finditer(
            r"^holding invoice:17 with fence (\d+)$", out, re.MULTILINE
        )
    ]
    assert len(fences) == 3, outputs
    assert len(set(fences)) == 3, "every grant has its own fence"
    reports = [out for out in outputs if "the daily report runs here" in out]
    assert len(reports) == 1, outputs

    r = redis.Redis.from_url(server_url)
    try:
        # The job's lock is kept for min_hold after the run; the invoice lock is gone.
        assert r.exists("lock:daily-report") == 1
        assert r.exists("lock:invoice:17") == 0
    finally:
        r.close()
