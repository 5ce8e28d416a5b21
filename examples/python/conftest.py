"""pytest fixtures for the Python examples: a real redis-server with the fencelock module,
started per test on a free port in a temporary directory.

``FENCELOCK_REDIS_SERVER`` picks the server binary (default ``redis-server`` on PATH),
``FENCELOCK_MODULE`` the module (default ``target/release/libfencelock.so``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server_url(tmp_path):
    binary = os.environ.get("FENCELOCK_REDIS_SERVER", "redis-server")
    module = os.environ.get(
        "FENCELOCK_MODULE", str(REPO / "target/release/libfencelock.so")
    )
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(tmp_path),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(tmp_path / "redis.log"),
            "--loadmodule",
            module,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_ready(url, process, tmp_path / "redis.log")
        yield url
    finally:
        process.kill()
        process.wait()


def _wait_ready(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited: {log.read_text()}")
        try:
            with redis.Redis.from_url(url) as client:
                client.ping()
            return
        except redis.ConnectionError:
            time.sleep(0.02)
    raise RuntimeError("redis-server did not start")
