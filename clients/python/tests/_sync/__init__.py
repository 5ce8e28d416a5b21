"""The client's tests on threads, generated from ``tests/_async`` by
``scripts/unasync.py``: edit those, never these (``make python-lint`` fails when one
is out of date). ``conftest.py`` and ``helpers.py`` are written by hand on each side."""
