"""Real servers for the tests: redis-server (or Valkey) with the fencelock module
loaded,
each on a free port in its own temporary directory, started and stopped by the tests.

``FENCELOCK_REDIS_SERVER`` picks the server binary (default ``redis-server`` on PATH),
``FENCELOCK_MODULE`` the module (default ``target/release/libfencelock.so`` of this
repository), as for the Rust integration tests and the examples."""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, Callable, Optional

import redis

REPO = Path(__file__).resolve().parents[3]


def server_binary() -> str:
    return os.environ.get("FENCELOCK_REDIS_SERVER", "redis-server")


def module_path() -> str:
    return os.environ.get(
        "FENCELOCK_MODULE", str(REPO / "target/release/libfencelock.so")
    )


def _ephemeral_low() -> int:
    """The first port of Linux's range for outgoing connections' local ports (a port
    there can be taken by any connection between our check and the server's bind)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(bus: bool = False) -> int:
    """A free port below the ephemeral range; with ``bus``, its cluster bus port
    (+10000) is free and below that range too."""
    top = _ephemeral_low() - 1 - (10000 if bus else 0)
    while True:
        port = random.randint(10000, top)
        if _bindable(port) and (not bus or _bindable(port + 10000)):
            return port


def free_cluster_port() -> int:
    return free_port(bus=True)


# Looked up before any fork: the child only calls it (no loader lock to take there).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    """In the server's process before it runs: it is killed when the test process
    dies, however that dies (a killed pytest leaves no server behind)."""
    pr_set_pdeathsig, sigkill = 1, 9
    _PRCTL(pr_set_pdeathsig, sigkill, 0, 0, 0)


def spawn(
    argv: list[str], stderr: Optional[IO[bytes]] = None
) -> subprocess.Popen[bytes]:
    """Starts a child tied to the test process (see ``_die_with_parent``)."""
    return subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=stderr if stderr is not None else subprocess.DEVNULL,
        preexec_fn=_die_with_parent,  # a prctl call only: no lock to take after fork
    )


class PortTaken(RuntimeError):
    """The server could not bind its port (or its cluster bus port)."""


class Server:
    """One server process; ``stop`` kills it."""

    def __init__(self, directory: Path, *extra: str, port: int = 0) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        # A port taken between the pick and the bind: the server exits, pick again.
        for attempt in range(5):
            self.port = port or free_port()
            self.log = directory / "server.log"
            self.process = spawn(
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
                ]
            )  # fmt: skip
            try:
                self._wait_ready()
                return
            except PortTaken:
                if port or attempt == 4:
                    raise

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
                log = self.log.read_text() if self.log.exists() else ""
                if "Failed listening on port" in log:
                    raise PortTaken(log)
                raise RuntimeError(f"server exited: {log}")
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
