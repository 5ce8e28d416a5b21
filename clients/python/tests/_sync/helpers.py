"""The threads' twin of ``tests/_async/helpers.py`` (same names): sleeping, and
calling something later beside the test's own wait (a timer thread). Written by
hand, not generated."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def later(seconds: float, call: Callable[..., Any], *args: Any) -> None:
    """Calls ``call(*args)`` in ``seconds``, in a thread beside the caller's."""
    threading.Timer(seconds, call, args=args).start()


def spawn(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Runs ``target()`` in a thread beside the caller's; its result or exception
    lands in the dict (``"result"``, ``"error"``)."""
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["result"] = target()
        except BaseException as error:  # reported by the test
            outcome["error"] = error

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, outcome


def join(thread: threading.Thread, timeout: float) -> None:
    """Waits up to ``timeout`` seconds for what ``spawn`` started."""
    thread.join(timeout)


def until(condition: Callable[[], bool], timeout: float, message: str) -> None:
    """Waits until ``condition()`` holds; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.02)
