"""pytest fixtures for the Python examples: a real redis-server with the fencelock module,
started per test on a free port in a temporary directory.

``FENCELOCK_REDIS_SERVER`` picks the server binary (default ``redis-server`` on PATH),
``FENCELOCK_MODULE`` the module (default ``target/release/libfencelock.so``).
"""

from __future__ import annotations

import ctypes
import os
import random
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    """A free port below Linux's range for outgoing connections' local ports, where
    no connection can take it between this check and the server's bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randint(10000, low - 1)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


# Looked up before any fork: the child only calls it (no loader lock to take there).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    """In the server's process: killed with the test process, however that dies."""
    pr_set_pdeathsig, sigkill = 1, 9
    _PRCTL(pr_set_pdeathsig, sigkill, 0, 0, 0)


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
        preexec_fn=_die_with_parent,  # noqa: PLW1509 (a prctl call, no lock taken)
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
