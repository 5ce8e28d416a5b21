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
