"""The two ways ``python -m fencelock top`` shows its frames: ``once`` prints one and
returns (for scripts and tests); ``interactive`` redraws the terminal's alternate
screen every ``interval`` seconds until q (or Ctrl-C), reading keys one at a time
without echo (cbreak mode), the terminal given back as it was on the way out."""

from __future__ import annotations

import os
import select
import sys
import time
from typing import Any

from rich.console import Console
from rich.live import Live

from . import snapshot, view

QUIT_KEYS = (b"q", b"Q")


def _clock() -> str:
    return time.strftime("%H:%M:%S")


def once(client: Any, url: str, count: int, order: str, console: Console) -> None:
    frame = snapshot.read(client, url, count, order)
    console.print(view.frame(frame, _clock(), interactive=False))


def interactive(
    client: Any, url: str, count: int, order: str, interval: float, console: Console
) -> None:
    import termios
    import tty

    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    try:
        tty.setcbreak(stdin)
        with Live(console=console, screen=True, auto_refresh=False) as live:
            while True:
                frame = snapshot.read(client, url, count, order)
                # Fitted to the terminal's height as it is now (it may be resized).
                shown = view.frame(
                    frame, _clock(), interactive=True, height=console.size.height
                )
                live.update(shown, refresh=True)
                if _quit_within(stdin, interval):
                    return
    except KeyboardInterrupt:
        return
    finally:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)


def _quit_within(stdin: int, seconds: float) -> bool:
    """Waits ``seconds`` for keys; True as soon as a quit key comes."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([stdin], [], [], left)
        if ready:
            key = os.read(stdin, 1)
            if key in QUIT_KEYS or not key:  # q, or the terminal went away
                return True
