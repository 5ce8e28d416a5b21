"""The threads' twin of ``tests/_async/conftest.py``: the generated sync tests take
``r`` and ``any_r`` from ``tests/conftest.py`` (sync clients) and run as plain
functions, so nothing is added here. Written by hand, not generated."""
