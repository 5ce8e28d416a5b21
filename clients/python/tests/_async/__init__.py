"""The client's tests written once, on asyncio: ``tests/_sync`` is generated from
these by ``scripts/unasync.py`` (``make python-unasync``)."""
