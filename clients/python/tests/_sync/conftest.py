"""The threads' twin of ``tests/_async/conftest.py``: the generated sync tests take
``r`` and ``any_r`` from ``tests/conftest.py`` (sync clients) and run as plain
functions; what ``helpers.later`` started is joined when a test's body ends, before
its fixtures close the clients a timer may still be using. Written by hand, not
generated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .helpers import join_timers


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield
    join_timers()
