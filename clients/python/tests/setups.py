"""Deployments of their own for tests/test_constructions.py: a server with or without
the module, one that speaks only TLS (with a CA, a server and a client certificate made
here with the ``openssl`` CLI), a master with a replica, a Sentinel watching a master,
and what a server itself says about its clients (``CLIENT LIST``, ``INFO stats``).

Like ``servers.py`` (whose binary and module choice it follows:
``FENCELOCK_REDIS_SERVER``, ``FENCELOCK_MODULE``), every process runs on a free port of
127.0.0.1 in its own temporary directory and is killed by the test that started it."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import redis
from servers import (
    Server,
    free_port,
    module_path,
    server_binary,
    spawn,
    wait_until,
)

# What a server built without TLS logs when asked for a TLS port: Redis >= 7.2 and
# Valkey ("Missing implement of connection type tls", "Failed finding TLS support"),
# older builds ("TLS is not supported", or tls-port refused as a bad directive).
NO_TLS_SIGNS = ("connection type tls", "tls support", "tls is not supported")


class ServerExited(RuntimeError):
    def __init__(self, binary: str, output: str) -> None:
        super().__init__(f"{binary} exited at start:\n{output}")
        self.output = output


class TlsUnsupported(Exception):
    """The server binary was built without TLS."""


@dataclass(frozen=True)
class Tls:
    """A test CA and the certificates it signed: the server's (for 127.0.0.1) and a
    client's, so that the server can require client certificates (its default)."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path

    def server_args(self) -> list[str]:
        return [
            "--tls-cert-file", str(self.cert),
            "--tls-key-file", str(self.key),
            "--tls-ca-cert-file", str(self.ca),
        ]  # fmt: skip

    def client_kwargs(self) -> dict[str, Any]:
        """What a ``rediss://`` client needs besides the URL."""
        return {
            "ssl_ca_certs": str(self.ca),
            "ssl_certfile": str(self.client_cert),
            "ssl_keyfile": str(self.client_key),
        }


def make_tls(directory: Path) -> Tls:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with
    the ``openssl`` CLI (EC keys: fast to make)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl CLI is needed to make the test certificates")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(
            [openssl, *args], cwd=directory, check=True, capture_output=True, timeout=30
        )

    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *new_key, "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=fencelock test CA")  # fmt: skip
    extensions = {
        "server": "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth\n",
        "client": "extendedKeyUsage=clientAuth\n",
    }
    for name, extension in extensions.items():
        (directory / f"{name}.ext").write_text(extension)
        run("req", *new_key, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN=fencelock test {name}")  # fmt: skip
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
            "-extfile", f"{name}.ext")  # fmt: skip
    return Tls(
        directory / "ca.crt",
        directory / "server.crt",
        directory / "server.key",
        directory / "client.crt",
        directory / "client.key",
    )


class Node:
    """One server process: redis-server (or valkey-server) with the module loaded
    (``module=False``: without it), on plain TCP or, with ``tls``, on a TLS port only
    (``--port 0``)."""

    def __init__(
        self,
        directory: Path,
        *extra: str,
        module: bool = True,
        tls: Optional[Tls] = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.port = free_port()
        self.tls = tls
        self.log = directory / "server.log"
        if tls is None:
            listen = ["--port", str(self.port)]
        else:
            listen = ["--port", "0", "--tls-port", str(self.port), *tls.server_args()]
        loadmodule = ["--loadmodule", module_path()] if module else []
        self._start(
            [server_binary(), *listen, "--bind", "127.0.0.1", "--dir", str(directory),
             "--save", "", "--appendonly", "no", "--logfile", str(self.log),
             *loadmodule, *extra]
        )  # fmt: skip

    def _start(self, argv: list[str]) -> None:
        self._stderr = self.directory / "stderr.log"
        with self._stderr.open("wb") as stderr:
            self.process = spawn(argv, stderr)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerExited(argv[0], self.output())
            try:
                with self.client(socket_timeout=2) as client:
                    client.ping()
                return
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{argv[0]} did not start:\n{self.output()}")

    def output(self) -> str:
        texts = [p.read_text(errors="replace") for p in (self._stderr, self.log)]
        return "\n".join(text for text in texts if text)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        scheme = "redis" if self.tls is None else "rediss"
        return f"{scheme}://127.0.0.1:{self.port}/0"

    def client_kwargs(self) -> dict[str, Any]:
        """How to reach this node, as ``redis.Redis`` keyword arguments."""
        kwargs: dict[str, Any] = {"host": "127.0.0.1", "port": self.port}
        if self.tls is not None:
            kwargs.update(ssl=True, **self.tls.client_kwargs())
        return kwargs

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(**{**self.client_kwargs(), **kwargs})

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def start_tls_node(directory: Path, tls: Tls, *extra: str) -> Node:
    """A node on a TLS port only; ``TlsUnsupported`` if the binary has no TLS."""
    try:
        return Node(directory, *extra, tls=tls)
    except ServerExited as exited:
        text = exited.output.lower()
        if any(sign in text for sign in NO_TLS_SIGNS) or (
            "tls-port" in text and "bad directive" in text
        ):
            last = exited.output.strip().splitlines()[-1:] or [""]
            raise TlsUnsupported(
                f"{server_binary()} was built without TLS ({last[0].strip()})"
            ) from None
        raise


class Sentinel(Node):
    """``<server binary> sentinel.conf --sentinel`` watching ``master`` as
    ``service`` with a quorum of one and short timeouts: a master is down after 1 s."""

    def __init__(self, directory: Path, master: Node, service: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.port = free_port()
        self.tls = None
        self.log = directory / "sentinel.log"
        conf = directory / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {directory}\n"
            f"logfile {self.log}\n"
            f"sentinel monitor {service} 127.0.0.1 {master.port} 1\n"
            f"sentinel down-after-milliseconds {service} 1000\n"
            f"sentinel failover-timeout {service} 10000\n"
            f"sentinel parallel-syncs {service} 1\n"
        )
        self._start([server_binary(), str(conf), "--sentinel"])

    def master_address(self, service: str) -> Optional[tuple[str, int]]:
        with self.client() as client:
            reply = client.execute_command(
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", service
            )
        if not reply:
            return None
        host, port = (
            part.decode() if isinstance(part, bytes) else part for part in reply
        )
        return str(host), int(port)

    def knows_replica(self, service: str, replica: Node) -> bool:
        """Whether the Sentinel lists ``replica`` as a healthy replica of the service:
        only then can it fail over to it."""
        with self.client(decode_responses=True) as client:
            rows = client.execute_command("SENTINEL", "REPLICAS", service)
        for row in rows:
            fields = row if isinstance(row, dict) else dict(zip(row[::2], row[1::2]))
            if (
                int(fields.get("port", 0)) == replica.port
                and fields.get("flags") == "slave"
                and fields.get("master-link-status") == "ok"
            ):
                return True
        return False


def start_replica(directory: Path, primary: Union[Node, Server]) -> Node:
    replica = Node(directory, "--replicaof", "127.0.0.1", str(primary.port))

    def linked() -> bool:
        with replica.client() as client:
            return bool(client.info("replication").get("master_link_status") == "up")

    wait_until(linked, 20, "replication link")
    return replica


def blocked_waits(client: Any) -> list[dict[str, str]]:
    """The server's clients that are blocked in ``LOCK.ACQUIRE`` (``CLIENT LIST``)."""
    return [
        entry
        for entry in client.client_list()
        if entry.get("cmd") == "lock.acquire" and "b" in entry.get("flags", "")
    ]


def connections_received(client: Any) -> int:
    """``total_connections_received`` of ``INFO stats``: every TCP connection the
    server ever accepted."""
    return int(client.info("stats")["total_connections_received"])


@contextlib.contextmanager
def stopping(*nodes: Any) -> Iterator[None]:
    """Kills ``nodes`` (``Node`` or ``servers.Server``) at the end, whatever happens."""
    try:
        yield
    finally:
        for node in nodes:
            node.stop()
