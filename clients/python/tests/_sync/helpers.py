"""The threads' twin of ``tests/_async/helpers.py`` (same names): sleeping, and
calling something later beside the test's own wait (a timer thread). Written by
hand, not generated."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from typing import Any, Callable, TypeVar, cast

import fencelock

T = TypeVar("T")


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def drop_in(client: Any, name: str, **kwargs: Any) -> fencelock.Lock:
    """``client.lock(name, lock_class=fencelock.Lock, **kwargs)``, typed as the
    drop-in it returns (redis-py's sync client is not annotated)."""
    lock: fencelock.Lock = client.lock(name, lock_class=fencelock.Lock, **kwargs)
    return lock


# Timers started by ``later``, joined when the test's body ends (``conftest.py``), so
# that none calls the test's client after its fixture closed it.
_timers: list[threading.Timer] = []


def in_thread(call: Callable[..., T], *args: Any) -> T:
    """Runs the blocking ``call(*args)``: the refresher has a thread of its own
    already (the asyncio side runs it in a thread, beside the loop)."""
    return call(*args)


def later(seconds: float, call: Callable[..., Any], *args: Any) -> None:
    """Calls ``call(*args)`` in ``seconds``, in a thread beside the caller's."""
    timer = threading.Timer(seconds, call, args=args)
    _timers.append(timer)
    timer.start()


def join_timers(timeout: float = 10) -> None:
    while _timers:
        _timers.pop().join(timeout)


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


def set_within(event: threading.Event, timeout: float) -> bool:
    """Whether ``event`` is set within ``timeout`` seconds."""
    return event.wait(timeout)


def next_of(items: Iterator[T]) -> T:
    """The next item of an iterator (``__anext__`` on the asyncio side)."""
    return next(items)


def close_iterator(items: Iterator[Any]) -> None:
    """Closes what ``observe()`` returned (a generator, annotated as the iterator it
    is to its users)."""
    cast(Generator[Any, None, None], items).close()


def refresher_running(locks: Any) -> bool:
    """Whether the manager's refresher thread runs (it ends a while after its last
    lease): a thread of its name (each manager's refresher has its own)."""
    name = locks._refresher.name
    return any(thread.name == name for thread in threading.enumerate())


def until(condition: Callable[[], bool], timeout: float, message: str) -> None:
    """Waits until ``condition()`` holds; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.02)


class Waiter:
    """Acquires ``lock`` (waiting up to 10 s) in a thread beside the test and holds
    it until ``leave()``; ``granted`` says once the acquire ended (``result``: True,
    False or the error), and the label goes into ``order`` on a grant."""

    def __init__(self, lock: Any, order: list[str], name: str) -> None:
        self.lock = lock
        self.order = order
        self.label = name
        self.result: Any = None
        self.fence: Any = None
        self._granted = threading.Event()
        self._leave = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self.lock.acquire(blocking_timeout=10)
            self.fence = self.lock.fence
            self.order.append(self.label)
        except Exception as error:
            self.result = error
        self._granted.set()
        if self.result is True:
            self._leave.wait(10)
            self.lock.release()

    def granted(self, timeout: float) -> bool:
        """Whether the acquire ends within ``timeout`` seconds."""
        return self._granted.wait(timeout)

    def is_granted(self) -> bool:
        return self._granted.is_set()

    def leave(self) -> None:
        self._leave.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
