"""``python -m fencelock top``: ``--once`` prints the hottest lock of a server with a
contended lock (and every primary of a cluster); the interactive view, driven in a
real terminal (tmux: keys sent, the screen read back), shows it, follows a change at
its next refresh and quits on q; a terminal too small for every primary says which
it left out. The command runs as a user runs it, in a process of its own."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Optional

import pytest
import redis
import redis.cluster
from servers import Server, wait_until

import fencelock
from fencelock.top import view
from fencelock.top.snapshot import Frame, HotLock
from fencelock.top.snapshot import Server as Primary

TOP = [sys.executable, "-m", "fencelock", "top"]


def top(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TOP, *args], capture_output=True, text=True, timeout=60, env=_env()
    )


def _env() -> dict[str, str]:
    # Wide enough that no lock name or column is folded.
    return {**os.environ, "COLUMNS": "120", "LINES": "50"}


def _terminal_env() -> dict[str, str]:
    # The terminal says its size: a COLUMNS or LINES of the test's own environment
    # would override it (rich reads them first), and a frame taller than the pane
    # scrolls its own top lines away.
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


class Contention:
    """A lock held by one client and waited for by others, each waiter on a
    connection of its own (``LOCK.ACQUIRE … BLOCK``), as the server sees real
    contention; ``close`` releases the holder and lets every waiter through."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.holders: list[tuple[str, bytes]] = []
        self.threads: list[threading.Thread] = []

    def hold(self, key: str) -> None:
        with redis.Redis(port=self.port) as client:
            token, _ = client.execute_command("LOCK.ACQUIRE", key, 60000)
        self.holders.append((key, token))

    def wait_for(self, key: str, waiters: int) -> None:
        before = _waiters(self.port, key)
        for _ in range(waiters):
            thread = threading.Thread(target=self._wait, args=(key,), daemon=True)
            thread.start()
            self.threads.append(thread)
        wait_until(
            lambda: _waiters(self.port, key) == before + waiters,
            20,
            f"{waiters} more waiters queued for {key}",
        )

    def _wait(self, key: str) -> None:
        # A lease of 1 ms: each waiter granted in turn lets the next one through.
        with redis.Redis(port=self.port) as client:
            client.execute_command("LOCK.ACQUIRE", key, 1, "BLOCK", 30000)

    def close(self) -> None:
        with redis.Redis(port=self.port) as client:
            for key, token in self.holders:
                client.execute_command("LOCK.RELEASE", key, token)
        for thread in self.threads:
            thread.join(30)


def _waiters(port: int, key: str) -> int:
    with redis.Redis(port=port) as client:
        info = fencelock.lock_info(client, key)
    return 0 if info is None else info["waiters"]


@contextmanager
def contention(port: int) -> Iterator[Contention]:
    made = Contention(port)
    try:
        yield made
    finally:
        made.close()


def rows(output: str) -> dict[str, list[str]]:
    """The hottest-locks table's rows by lock name: the columns after it."""
    found = {}
    for line in output.splitlines():
        words = line.split()
        if words and words[0].startswith("lock:"):
            found[words[0]] = words[1:]
    return found


def test_once_lists_the_hottest_lock_first(server: Server, r: redis.Redis) -> None:
    # One wait (a BLOCK acquire) and one holding recorded, whatever ran before.
    token, _ = r.execute_command("LOCK.ACQUIRE", "lock:before", 30000, "BLOCK", 10)
    r.execute_command("LOCK.RELEASE", "lock:before", token)
    with contention(server.port) as locks:
        locks.hold("lock:hot")
        locks.hold("lock:warm")
        # A wait that gives up, and a try without BLOCK answered busy.
        assert r.execute_command("LOCK.ACQUIRE", "lock:hot", 1000, "BLOCK", 1) is None
        assert r.execute_command("LOCK.ACQUIRE", "lock:hot", 1000) is None
        locks.wait_for("lock:hot", 3)
        locks.wait_for("lock:warm", 1)
        shown = top("--once", server.url)
        figures = r.info("fencelock")
    assert shown.returncode == 0, shown.stderr
    # The counters line has what an operator acts on, as INFO says it; the busy
    # answers to tries without BLOCK (fencelock_contended) are not among them.
    (alerts,) = [row for row in shown.stdout.splitlines() if "block timeouts" in row]
    assert f"block timeouts {figures['fencelock_block_timeouts']} " in alerts
    assert f"evicted {figures['fencelock_evicted']}" in alerts
    assert figures["fencelock_contended"] > 0 and "contended" not in shown.stdout
    table = rows(shown.stdout)
    assert list(table)[:2] == ["lock:hot", "lock:warm"], shown.stdout
    assert table["lock:hot"][0] == "3" and table["lock:warm"][0] == "1"
    assert f"server 127.0.0.1:{server.port}" in shown.stdout
    assert "held 2" in shown.stdout and "waiters 4" in shown.stdout
    for line in ("waits", "holds"):
        assert any(
            row.split()[:1] == [line] and "p99" in row
            for row in shown.stdout.splitlines()
        ), shown.stdout
    # Never a token: the holders' tokens are not on the screen.
    for _, token in locks.holders:
        assert token.decode() not in shown.stdout


def test_once_by_held_orders_by_the_longest_holding(
    server: Server, r: redis.Redis
) -> None:
    with contention(server.port) as locks:
        locks.hold("lock:old")
        wait_until(
            lambda: _held_ms(server.port, "lock:old") > 50, 10, "an older holding"
        )
        locks.hold("lock:new")
        shown = top("--once", "--by", "held", server.url)
    assert shown.returncode == 0, shown.stderr
    assert list(rows(shown.stdout))[:2] == ["lock:old", "lock:new"], shown.stdout
    assert "hottest by held" in shown.stdout


def _held_ms(port: int, key: str) -> int:
    with redis.Redis(port=port) as client:
        entries = client.execute_command("LOCK.TOP", "BY", "held")
    return max((int(entry[3] or 0) for entry in entries if entry[0] == key.encode()),
               default=0)  # fmt: skip


def test_once_on_a_cluster_shows_every_primary(cluster: list[Server]) -> None:
    keys = ["lock:{a}", "lock:{b}", "lock:{c}", "lock:{d}", "lock:{e}"]
    with redis.cluster.RedisCluster("127.0.0.1", cluster[0].port) as client:
        client.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        owners = {key: client.get_node_from_key(key).port for key in keys}
        tokens = [client.execute_command("LOCK.ACQUIRE", key, 60000) for key in keys]
        try:
            shown = top("--once", cluster[0].url)
        finally:
            for key, (token, _) in zip(keys, tokens):
                client.execute_command("LOCK.RELEASE", key, token)
    assert shown.returncode == 0, shown.stderr
    for node in cluster:
        assert f"server 127.0.0.1:{node.port}" in shown.stdout, shown.stdout
    # Each lock under the primary that holds it.
    blocks = shown.stdout.split("server 127.0.0.1:")[1:]
    for key, port in owners.items():
        (block,) = [one for one in blocks if one.startswith(f"{port}\n")]
        assert key in rows(block), (key, port, shown.stdout)


def test_an_unreachable_server_is_said_plainly() -> None:
    shown = top("--once", "redis://127.0.0.1:1")
    assert shown.returncode == 1
    assert shown.stderr.startswith("cannot reach redis://127.0.0.1:1")


def test_a_password_in_the_url_is_never_shown(server: Server, r: redis.Redis) -> None:
    r.execute_command("ACL", "SETUSER", "watcher", "on", ">s3cret", "+@all", "~*")
    try:
        url = f"redis://watcher:s3cret@127.0.0.1:{server.port}"
        shown = top("--once", url)
        assert shown.returncode == 0, shown.stderr
        assert f"redis://watcher:***@127.0.0.1:{server.port}" in shown.stdout
        unreachable = top("--once", "redis://watcher:s3cret@127.0.0.1:1")
        assert unreachable.returncode == 1
        for output in (shown.stdout, shown.stderr, unreachable.stderr):
            assert "s3cret" not in output
    finally:
        r.execute_command("ACL", "DELUSER", "watcher")


def test_the_interactive_view_needs_a_terminal(server: Server) -> None:
    shown = subprocess.run(
        [*TOP, server.url], capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert shown.returncode == 2
    assert "--once" in shown.stderr


def shows(screen: str, waiters: str) -> bool:
    """Whether one capture of the interactive view has the hot lock with ``waiters``
    (read from one capture: a capture taken while the view redraws may be blank)."""
    return "q quits" in screen and rows(screen).get("lock:hot", [""])[0] == waiters


def until_shown(screen: Callable[[], str], waiters: str) -> None:
    """Waits up to 30 s for a capture that ``shows`` it; fails with the last one."""
    deadline = time.monotonic() + 30
    while not shows(last := screen(), waiters):
        if time.monotonic() > deadline:
            raise AssertionError(f"lock:hot with {waiters} waiters not shown:\n{last}")
        time.sleep(0.05)


def test_the_interactive_view_in_a_terminal(server: Server, r: redis.Redis) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    # A tmux server of its own (its own socket), started with this environment.
    tmux = ["tmux", "-L", f"fencelock-top-{os.getpid()}"]
    command = " ".join([*TOP, server.url])
    script = f"{command}; echo top exited $?; sleep 60"

    def screen() -> str:
        return subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "top"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip

    with contention(server.port) as locks:
        locks.hold("lock:hot")
        locks.wait_for("lock:hot", 2)
        subprocess.run(
            [*tmux, "new-session", "-d", "-s", "top", "-x", "120", "-y", "40", script],
            check=True, timeout=10, env=_terminal_env(),
        )  # fmt: skip
        try:
            until_shown(screen, "2")
            # Refreshed: one more waiter shows at the next frame.
            locks.wait_for("lock:hot", 1)
            until_shown(screen, "3")
            subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
            wait_until(lambda: "top exited 0" in screen(), 30, "top quit on q")
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=10)


def test_a_frame_fits_the_terminal_and_says_what_it_left_out() -> None:
    """Three primaries of five locks each, drawn in terminals of several heights:
    never more lines than the terminal has, and every primary and every lock is
    either shown or counted in a "+n more" line."""
    from rich.console import Console

    info = {"fencelock_acquired": 10, "fencelock_held_locks": 5}
    primaries = [
        Primary(
            f"10.0.0.{n}:6379",
            locks=[HotLock(f"lock:{n}:{i}", 5 - i, 100, 200) for i in range(5)],
            info=info,
        )
        for n in (1, 2, 3)
    ]
    frame = Frame("redis://10.0.0.1:6379", "waiters", primaries)

    def drawn(height: Optional[int]) -> list[str]:
        console = Console(width=100, file=io.StringIO(), record=True)
        console.print(view.frame(frame, "09:41:07", interactive=True, height=height))
        return console.export_text().splitlines()

    assert len(rows("\n".join(drawn(None)))) == 15
    for height in (5, 9, 12, 16, 23, 30, 40):
        lines = drawn(height)
        assert len(lines) <= height, (height, lines)
        text = "\n".join(lines)
        blocks = text.split("server ")[1:]
        more = re.search(r"\+(\d+) more primar(?:y|ies): (.*) \(", text)
        named = [] if more is None else more.group(2).split(", ")
        assert [block.split()[0] for block in blocks] + named == [
            primary.address for primary in primaries
        ], (height, text)
        for block in blocks:
            counted = re.search(r"\+(\d+) more locks?", block)
            left_out = 0 if counted is None else int(counted.group(1))
            assert len(rows(block)) + left_out == 5, (height, block)
    assert len(rows("\n".join(drawn(40)))) == 15, "room for every lock"


def test_a_small_terminal_names_the_primaries_it_cannot_show(
    cluster: list[Server],
) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    tmux = ["tmux", "-L", f"fencelock-top-small-{os.getpid()}"]
    script = f"{' '.join([*TOP, cluster[0].url])}; echo top exited $?; sleep 60"

    def screen() -> str:
        return subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "top"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip

    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "top", "-x", "100", "-y", "12", script],
        check=True, timeout=10, env=_terminal_env(),
    )  # fmt: skip
    try:
        wait_until(
            lambda: "more primaries" in screen() and "q quits" in screen(),
            30,
            "the view names the primaries it left out",
        )
        shown = screen()
        for node in cluster:
            assert f"127.0.0.1:{node.port}" in shown, shown
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
        wait_until(lambda: "top exited 0" in screen(), 30, "top quit on q")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=10)
