"""The package's version, one with the module's (the crate's), in a file of its own
so that what sits below the package's ``__init__`` can name it without importing it."""

__version__ = "0.4.0"
