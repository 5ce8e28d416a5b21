"""Real servers for the tests: redis-server (or Valkey) with the fencelock module
loaded,
each on a free port in its own temporary directory, started and stopped by the tests.

``FENCELOCK_REDIS_SERVER`` picks the server binary (default ``redis-server`` on PATH),
``FENCELOCK_MODULE`` the module (default ``target/release/libfencelock.so`` of this
repository), as for the Rust integration tests and the examples."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

import redis

REPO = Path(__file__).resolve().parents[3]


def server_binary() -> str:
    return os.environ.get("FENCELOCK_REDIS_SERVER", "redis-server")


def module_path() -> str:
    return os.environ.get(
        "FENCELOCK_MODULE", str(REPO / "target/release/libfencelock.so")
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too: at most 55535."""
    while True:
        port = random.randint(20000, 55535)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port


class Server:
    """One server process; ``stop`` kills it."""

    def __init__(self, directory: Path, *extra: str, port: int = 0) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.port = port or free_port()
        self.log = directory / "server.log"
        self.process = subprocess.Popen(
            [
                server_binary(),
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(directory),
                "--save", "",
                "--appendonly", "no",
                "--logfile", str(self.log),
                "--loadmodule", module_path(),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._wait_ready()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(port=self.port, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()}")
            try:
                with self.client() as client:
                    client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("server did not start")


def wait_until(
    condition: Callable[[], bool], timeout: float = 10, message: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.02)


def start_cluster(directory: Path, masters: int = 3) -> list[Server]:
    """Masters with ``--cluster-enabled yes``, joined by ``redis-cli --cluster create``
    with every slot assigned; returns once every node reports ``cluster_state:ok``."""
    nodes = [
        Server(directory / f"node{i}", "--cluster-enabled", "yes",
               "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
               port=free_cluster_port())
        for i in range(masters)
    ]  # fmt: skip
    cli = shutil.which("redis-cli") or "redis-cli"
    subprocess.run(
        [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
         "--cluster-replicas", "0", "--cluster-yes"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip

    def all_ok() -> bool:
        for node in nodes:
            with node.client() as client:
                info = client.execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
        return True

    wait_until(all_ok, 30, "cluster_state:ok")
    return nodes


def start_replica(directory: Path, primary: Server) -> Server:
    replica = Server(directory, "--replicaof", "127.0.0.1", str(primary.port))

    def linked() -> bool:
        with replica.client() as client:
            return bool(client.info("replication").get("master_link_status") == "up")

    wait_until(linked, 20, "replication link")
    return replica
