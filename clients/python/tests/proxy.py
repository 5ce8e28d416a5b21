"""A TCP proxy between a client and a server that can lose one reply: the connection
that carries a chosen command is cut when the server answers it, after the server has
executed it. That is the "grant made, reply lost" failure that redis-py's automatic
retry turns into a second acquire."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Optional

from servers import free_port


class Proxy:
    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.port = free_port()
        self._cut_after: Optional[bytes] = None
        self.cuts = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_reply_to(self, command: bytes) -> None:
        """The next connection that sends ``command`` is closed instead of receiving
        the server's reply to it."""
        with self._lock:
            self._cut_after = command

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.server_port))
            pair = _Pair(self, client, upstream)
            threading.Thread(target=pair.to_server, daemon=True).start()
            threading.Thread(target=pair.to_client, daemon=True).start()

    def _claim_cut(self, data: bytes) -> bool:
        with self._lock:
            if self._cut_after is not None and self._cut_after in data:
                self._cut_after = None
                self.cuts += 1
                return True
            return False


class _Pair:
    def __init__(self, proxy: Proxy, client: socket.socket, upstream: socket.socket):
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.cut_next_reply = threading.Event()

    def to_server(self) -> None:
        while True:
            data = _recv(self.client)
            if not data:
                return self._close()
            if self.proxy._claim_cut(data):
                self.cut_next_reply.set()
            self.upstream.sendall(data)

    def to_client(self) -> None:
        while True:
            data = _recv(self.upstream)
            if not data or self.cut_next_reply.is_set():
                return self._close()
            self.client.sendall(data)

    def _close(self) -> None:
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""
