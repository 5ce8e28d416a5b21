"""The asyncio implementation, and the source of ``fencelock._sync``: every module
here but ``_compat`` and ``_refresher`` is turned into its sync twin by
``scripts/unasync.py``. Users import ``fencelock.asyncio`` (and ``fencelock``)."""
