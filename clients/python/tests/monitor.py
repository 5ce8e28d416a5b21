"""``MONITOR`` on a raw socket in a thread: every command the server executes while it
runs, to count what clients really sent (no polling shows up as one line per try)."""

from __future__ import annotations

import socket
import threading
import time


class Monitor:
    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._sock.sendall(b"MONITOR\r\n")
        self._sock.settimeout(0.05)
        self._chunks: list[bytes] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                return
            if data.startswith(b"+OK"):
                self._ready.set()
            self._chunks.append(data)

    def lines(self) -> list[str]:
        """The command lines seen so far, lower-cased (monitoring goes on)."""
        text = b"".join(list(self._chunks)).decode(errors="replace")
        return [line.lower() for line in text.splitlines() if line[1:2].isdigit()]

    def stop(self) -> list[str]:
        """Stops monitoring; the command lines seen, lower-cased."""
        time.sleep(0.1)  # the last commands' lines are still on their way
        self._stop.set()
        self._thread.join()
        self._sock.close()
        return self.lines()

    def count(self, lines: list[str], command: str) -> int:
        return sum(1 for line in lines if f'"{command.lower()}"' in line)
