# Generated from fencelock/_async/__init__.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""The asyncio implementation, and the source of ``fencelock._sync``: every module
here but ``_compat`` and ``_refresher`` is turned into its sync twin by
``scripts/unasync.py``. Users import ``fencelock`` (and ``fencelock``)."""
