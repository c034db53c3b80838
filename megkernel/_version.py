"""The package's version, in one place (read by ``pyproject.toml`` and the cache key)."""

__version__ = "0.2.0"
